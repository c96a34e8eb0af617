package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
)

// holderJSON is a lease holder as printed with --json.
type holderJSON struct {
	Namespace     string  `json:"namespace"`
	Key           string  `json:"key"`
	Owner         string  `json:"owner"`
	Host          string  `json:"host"`
	PID           int     `json:"pid"`
	Token         int64   `json:"token"`
	AcquiredAt    *string `json:"acquired_at"`
	ExpiresAt     *string `json:"expires_at"`
	HardExpiresAt *string `json:"hard_expires_at"`
	Live          bool    `json:"live"`
}

func (a *app) leasesCmd() *cobra.Command {
	var (
		f   sentinel.LeaseFilter
		all bool
	)
	cmd := &cobra.Command{
		Use:   "leases [PREFIX]",
		Short: "List lease holders: owner, host, pid, fencing token, expiry",
		Long: `leases lists the live leases of --namespace (or of every namespace with
--all-namespaces), optionally only keys starting with PREFIX. Liveness is
decided by the database clock. --expired also lists released and expired
rows, kept until prune removes them.`,
		Example: `  sentinel leases -n jobs
  sentinel leases invoice- --all-namespaces --json`,
		Args: args(0, 1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				f.Prefix = args[0]
			}
			if all {
				if cmd.Flags().Changed("namespace") {
					return usageErr("give --namespace or --all-namespaces, not both")
				}
				f.AllNamespaces = true
			} else {
				f.Namespace = a.namespace
			}
			hs, err := a.client.Leases(cmd.Context(), f)
			if err != nil {
				return err
			}
			now := time.Now()
			if a.jsonOut {
				out := make([]holderJSON, len(hs))
				for i, h := range hs {
					out[i] = holderJSON{Namespace: h.Namespace, Key: h.Key, Owner: h.Owner, Host: h.Host, PID: h.PID,
						Token: h.Token, AcquiredAt: tsJSON(h.AcquiredAt), ExpiresAt: tsJSON(h.ExpiresAt),
						HardExpiresAt: tsJSON(h.HardExpiresAt), Live: h.ExpiresAt.After(now)}
				}
				return a.printJSON(out)
			}
			w := a.table()
			row(w, "NAMESPACE", "KEY", "OWNER", "HOST", "PID", "TOKEN", "ACQUIRED", "EXPIRES")
			for _, h := range hs {
				row(w, h.Namespace, h.Key, h.Owner, h.Host, h.PID, h.Token, ts(h.AcquiredAt), ts(h.ExpiresAt)+" ("+relative(h.ExpiresAt)+")")
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if len(hs) == 0 {
				fprintln(a.stderr, "no live leases")
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list every namespace")
	cmd.Flags().BoolVar(&f.IncludeExpired, "expired", false, "also list expired and released lease rows")
	cmd.Flags().IntVar(&f.Limit, "limit", 1000, "at most this many rows")
	return cmd
}

// guardHelp is the part of lock's, elect's and queue lock's help that says
// how CMD's process tree is stopped.
const guardHelp = `

CMD and everything it starts stop before the lease can pass to anyone
else. CMD runs in a process group of its own, watched by a small
supervising process (sentinel re-executed), which signals the whole group:
an interrupt (SIGINT, SIGTERM to sentinel) sends SIGTERM, then SIGKILL
after --kill-after or at the lease's local deadline, whichever is first;
late renewals send SIGTERM min(--kill-after, TTL/4) before the local
deadline and SIGKILL at it; when the lease is taken over the group gets
SIGKILL at once; what CMD leaves running in its group when it exits is
stopped too. Only then is the lease released. Being in a group of its own,
CMD is not in the terminal's foreground: Ctrl-C reaches it through
sentinel (as SIGTERM), and it cannot read from the terminal (give it its
input from a file or a pipe).

If sentinel itself dies (SIGKILL, the OOM killer): on Linux the parent-death
signal, on every Unix the end of the control pipe, makes the supervisor
kill the group at once; the lease then expires on the database clock, one
TTL later. Best effort only: processes that leave the group (setsid,
setpgid) are not followed, and outside Unix only CMD itself is killed.`

// Environment passed to the command run by lock.
const (
	envLeaseKey       = "SENTINEL_LEASE_KEY"
	envLeaseNamespace = "SENTINEL_LEASE_NAMESPACE"
	envLeaseToken     = "SENTINEL_LEASE_TOKEN"
)

func (a *app) lockCmd() *cobra.Command {
	var (
		ttl       time.Duration
		noWait    bool
		timeout   time.Duration
		killAfter time.Duration
	)
	cmd := &cobra.Command{
		Use:   "lock KEY [-- CMD [ARGS...]]",
		Short: "Hold a lease while a command runs (or until interrupted)",
		Long: `lock acquires the lease on KEY (waiting for it unless --no-wait), keeps it
alive with heartbeats, and runs CMD with SENTINEL_LEASE_KEY,
SENTINEL_LEASE_NAMESPACE and SENTINEL_LEASE_TOKEN (the fencing token) in
its environment. When CMD exits the lease is released and lock exits with
CMD's exit code (128+N when a signal N ended it).

If the lease is lost while CMD runs (heartbeats cannot reach the database
before the lease's local deadline, or it was taken over) CMD's process
group is killed (see below) and lock exits with CMD's code, or 1 if CMD
exited 0: work guarded by a lost lease never reports success.

Without CMD, lock prints the token and holds the lease until interrupted.
With --no-wait, a lease held elsewhere exits 4 at once; an interrupt while
waiting exits 4 (CMD did not run).` + guardHelp,
		Example: `  sentinel lock nightly-report -- ./report.sh --full
  sentinel lock -n jobs reindex --ttl 10s -- sh -c 'reindex --fence "$SENTINEL_LEASE_TOKEN"'
  sentinel lock maintenance          # hold until Ctrl-C`,
		Args: args(1, -1),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			if d := cmd.ArgsLenAtDash(); d > 1 {
				return usageErr("lock takes one KEY before --, got %d", d)
			}
			key, command := args[0], args[1:]
			ctx := cmd.Context()
			opts := []sentinel.Option{sentinel.WithTTL(ttl)}
			if !noWait {
				opts = append(opts, sentinel.WithWait())
			}
			actx := ctx
			if timeout > 0 {
				var cancel context.CancelFunc
				actx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			lease, err := a.client.Lease(actx, key, opts...)
			if err != nil {
				if !noWait && errors.Is(actx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
					return refused("lock %q/%q: not acquired within --timeout %s: %v", a.namespace, key, timeout, err)
				}
				if ctx.Err() != nil {
					return refused("lock %q/%q: interrupted while waiting; not acquired, nothing ran", a.namespace, key)
				}
				return err
			}
			defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
			if len(command) == 0 {
				return a.holdUntilInterrupted(ctx, lease)
			}
			return a.runLocked(ctx, lease, command, killAfter, ttl)
		}),
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "lease time-to-live; heartbeats renew it every TTL/3")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "fail (exit 4) instead of waiting when the lease is held")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting for the lease after this long (exit 4); 0 waits forever")
	cmd.Flags().DurationVar(&killAfter, "kill-after", 5*time.Second, "after SIGTERM, send SIGKILL to CMD if it has not exited")
	return cmd
}

func (a *app) holdUntilInterrupted(ctx context.Context, lease *sentinel.Lease) error {
	if a.jsonOut {
		if err := a.printJSON(map[string]any{"namespace": lease.Namespace(), "key": lease.Key(),
			"token": lease.Token(), "owner": lease.Owner(), "expires_at": tsJSON(lease.ExpiresAt())}); err != nil {
			return err
		}
	} else {
		fprintf(a.stdout, "holding %s/%s with token %d; interrupt to release\n", lease.Namespace(), lease.Key(), lease.Token())
	}
	select {
	case <-ctx.Done():
		if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		fprintf(a.stderr, "released %s/%s\n", lease.Namespace(), lease.Key())
		return nil
	case <-lease.Done():
		return fmt.Errorf("lease lost: %w", lease.Err())
	}
}

// held is what a command runs under: a lease, a leadership term, or a set
// of queue turns.
type held interface {
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
	// Deadline is the local time until which the holder may trust what it
	// holds (zero: unknown now); the command's process group is killed by
	// then.
	Deadline() time.Time
}

// runLocked runs command while lease is held; see lockCmd.
func (a *app) runLocked(ctx context.Context, lease *sentinel.Lease, command []string, killAfter, ttl time.Duration) error {
	return a.runHeld(ctx, lease, fmt.Sprintf("lease %s/%s", lease.Namespace(), lease.Key()), []string{
		envLeaseKey + "=" + lease.Key(),
		envLeaseNamespace + "=" + lease.Namespace(),
		envLeaseToken + "=" + strconv.FormatInt(lease.Token(), 10),
	}, command, killAfter, ttl)
}

// runHeld runs command with env added while h is held, in a process group
// of its own watched by a supervising process (see guard_unix.go), and
// releases h only once the whole group is gone. An interrupt sends SIGTERM
// to the group, then SIGKILL after killAfter or at h's local deadline,
// whichever is first. Late renewals send SIGTERM min(killAfter, ttl/4)
// before the deadline and SIGKILL at it; a loss (taken over, or the
// deadline passed) sends SIGKILL at once. The result carries the
// command's exit code (never 0 after a loss).
func (a *app) runHeld(ctx context.Context, h held, what string, env, command []string, killAfter, ttl time.Duration) error {
	lateGrace := min(killAfter, ttl/4)
	// A grant that waited long (its statement blocked) can arrive close to
	// its local deadline; the command starts once a renewal moved it.
	for d := h.Deadline(); d.IsZero() || time.Until(d) <= lateGrace; d = h.Deadline() {
		select {
		case <-h.Done():
			return fmt.Errorf("%s was lost before %s started: %w", what, command[0], h.Err())
		case <-ctx.Done():
			return refused("interrupted before %s started", command[0])
		case <-time.After(10 * time.Millisecond):
		}
	}
	g, err := a.startGuard(command, env, h.Deadline(), lateGrace)
	if err != nil {
		return &codeError{code: 127, err: err}
	}
	var lost error
	done, interrupted := h.Done(), ctx.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-g.exited():
			break wait
		case <-done:
			done = nil
			// Someone else may hold it already: no grace.
			g.kill()
			if ctx.Err() == nil { // not an interrupt that ended h as well
				lost = h.Err()
				fprintf(a.stderr, "sentinel: %s lost (%v); killed %s and everything it started\n", what, lost, command[0])
			}
		case <-interrupted:
			interrupted = nil
			g.terminate(killAfter)
		case <-tick.C:
			g.deadline(h.Deadline())
		}
	}
	code := g.wait()
	if lost == nil {
		if err := h.Release(context.WithoutCancel(ctx)); err != nil && errors.Is(err, sentinel.ErrLeaseLost) {
			// Lost between the child's exit and the release: the work may
			// have overlapped another holder.
			lost = err
		}
	}
	if lost != nil {
		if code == 0 {
			code = exitError
		}
		return &codeError{code: code, err: fmt.Errorf("%s was lost while %s ran: %w", what, command[0], lost)}
	}
	if code != 0 {
		return &codeError{code: code}
	}
	return nil
}

// childCode is the exit code of a finished child: its own, or 128+N when
// signal N ended it (the shell convention).
func childCode(child *exec.Cmd, waitErr error) int {
	st := child.ProcessState
	if st == nil {
		if waitErr != nil {
			return exitError
		}
		return 0
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}
