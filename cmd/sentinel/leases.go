package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
rows, kept until prune removes them. When more than --limit rows match,
stderr says so.`,
		Example: `  sentinel leases -n jobs
  sentinel leases invoice- --all-namespaces --json`,
		Args: args(0, 1),
		RunE: a.runEChecked(func(*cobra.Command, []string) error { return checkListLimit(f.Limit) }, func(cmd *cobra.Command, args []string) error {
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
			// One more row than shown, to tell that some were left out; on
			// a copy: --limit is reprinted as typed in the hints.
			q := f
			var shown int
			q.Limit, shown = oneMore(f.Limit)
			hs, err := a.client.Leases(cmd.Context(), q)
			if err != nil {
				return err
			}
			if len(hs) > shown {
				hs = hs[:shown]
				defer a.leftOut(shown, "leases", "give a PREFIX or raise --limit")
			}
			now := dbNow()
			if len(hs) == 0 && !f.AllNamespaces && a.jsonOut {
				// On stderr: stdout stays the JSON a script reads, but a
				// person piping it into jq learns why it is empty.
				fprintf(a.stderr, "no live leases in %s; every namespace:\n  %s\n", nsLabel(a.namespace), a.againEvery(cmd))
			}
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
			if len(hs) == 0 && f.AllNamespaces {
				fprintln(a.stderr, "no live leases in any namespace")
			} else if len(hs) == 0 {
				fprintf(a.stderr, "no live leases in %s; every namespace:\n  %s\n", nsLabel(a.namespace), a.againEvery(cmd))
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "list every namespace")
	cmd.Flags().BoolVar(&f.IncludeExpired, "expired", false, "also list expired and released lease rows")
	cmd.Flags().IntVar(&f.Limit, "limit", 1000, "at most this many rows")
	return cmd
}

// Environment passed to the command run by lock.
const (
	envLeaseKey       = "SENTINEL_LEASE_KEY"
	envLeaseNamespace = "SENTINEL_LEASE_NAMESPACE"
	envLeaseToken     = "SENTINEL_LEASE_TOKEN"
)

func (a *app) lockCmd() *cobra.Command {
	var (
		ttl     time.Duration
		noWait  bool
		timeout time.Duration
		o       cmdOpts
		key     string
		command []string
	)
	cmd := &cobra.Command{
		Use:   "lock KEY [-- CMD [ARGS...]]",
		Short: "Hold a lease while a command runs (or until interrupted)",
		Long: `lock acquires the lease on KEY (waiting for it unless --no-wait), keeps it
alive with heartbeats, and runs CMD with SENTINEL_LEASE_KEY,
SENTINEL_LEASE_NAMESPACE and SENTINEL_LEASE_TOKEN (the fencing token) in
its environment. When CMD exits the lease is released and lock exits with
CMD's exit code (128+N when a signal N ended it). A CMD that cannot be
started exits as in a shell, the lease released at once: 127 when it is
not found, 126 when it is found but cannot be executed.

If the lease is lost while CMD runs (heartbeats cannot reach the database
before the lease's local deadline, or it was taken over) CMD's process
tree is killed (see below) and lock exits with CMD's code, or 1 if CMD
exited 0: work guarded by a lost lease never reports success.

CMD is what follows --: KEY is the only word before it, and a command
given without -- is refused (exit 2) with the command line that runs it
(sentinel lock KEY -- CMD), since its flags would be taken for lock's own
(a KEY that starts with - goes after a first --: lock -- -k -- CMD).
Without CMD, lock prints the token and holds the lease until interrupted
(a -- with nothing after it is refused: exit 2). A bad command line is
refused before lock connects, so even with the database down.
With --no-wait, a lease held elsewhere exits 4 at once; an interrupt while
waiting exits 4 (CMD did not run).` + containHelp,
		Example: `  sentinel lock nightly-report -- ./report.sh --full
  sentinel lock -n jobs reindex --ttl 10s -- sh -c 'reindex --fence "$SENTINEL_LEASE_TOKEN"'
  sentinel lock maintenance          # hold until Ctrl-C`,
		Args: args(1, -1),
		RunE: a.runEChecked(func(cmd *cobra.Command, args []string) error {
			var err error
			if key, command, err = a.splitNamed(cmd, args); err != nil {
				return err
			}
			if err := checkNames("KEY", []string{key}); err != nil {
				return err
			}
			if err := o.check(); err != nil {
				return err
			}
			if timeout < 0 {
				return usageErr("--timeout %s: give a duration of 0 (wait forever) or more", timeout)
			}
			return checkTTL(ttl, false)
		}, func(cmd *cobra.Command, args []string) error {
			a.warnElsewhere(cmd, leaseLookup, key)
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
					return refused("lock %q/%q: not acquired within --timeout %s: %w", a.namespace, key, timeout, err)
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
			return a.runLocked(ctx, lease, command, o, ttl)
		}),
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "lease time-to-live; heartbeats renew it every TTL/3")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "fail (exit 4) instead of waiting when the lease is held")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting for the lease after this long (exit 4); 0 waits forever")
	o.flags(cmd)
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

// runLocked runs command while lease is held; see lockCmd.
func (a *app) runLocked(ctx context.Context, lease *sentinel.Lease, command []string, o cmdOpts, ttl time.Duration) error {
	return a.runHeld(ctx, leaseHeld{lease}, fmt.Sprintf("lease %s/%s", lease.Namespace(), lease.Key()), []string{
		envLeaseKey + "=" + lease.Key(),
		envLeaseNamespace + "=" + lease.Namespace(),
		envLeaseToken + "=" + strconv.FormatInt(lease.Token(), 10),
	}, command, o, ttl)
}
