package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
)

// How the process tree of the command run by lock, elect and queue lock
// is held together (--contain, and SENTINEL_CONTAINMENT in its
// environment). The platform files (guard_*.go) implement them.
const (
	containAuto    = "auto"          // the strongest this system allows
	containPIDNS   = "pid-namespace" // Linux: a PID namespace whose init is the supervisor
	containCgroup  = "cgroup"        // Linux: a cgroup v2 of its own, killed with cgroup.kill
	containGroup   = "process-group" // Unix: a process group (best effort)
	containProcess = "process"       // elsewhere: the command alone (best effort)

	envContainment = "SENTINEL_CONTAINMENT"
)

// guardEvent is one line from the supervisor to sentinel: a kind and a
// number.
type guardEvent struct {
	kind byte
	n    int64
}

// Kinds of guardEvent.
const (
	evStarted  = 'S' // the command started; n: its process group as sentinel sees it (0: not needed)
	evPaused   = 'P' // SIGTSTP: the tree was stopped
	evAsk      = 'A' // SIGCONT while stopped: may the tree resume? (sentinel answers resume or kill)
	evLate     = 'W' // renewals are late: the tree got SIGTERM before the deadline
	evDeadline = 'L' // the local deadline passed: the tree was killed
)

// cmdOpts are the flags of lock, elect and queue lock that govern the
// command they run.
type cmdOpts struct {
	killAfter time.Duration
	contain   string
}

func (o *cmdOpts) flags(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&o.killAfter, "kill-after", 5*time.Second, "after SIGTERM, send SIGKILL to CMD if it has not exited (a second interrupt sends it at once)")
	cmd.Flags().StringVar(&o.contain, "contain", containAuto,
		"how CMD's process tree is held: auto, "+strings.Join(containModes, ", ")+" (see 'sentinel lock --help')")
}

// check refuses a containment this build does not know, and a negative
// --kill-after (it would turn every termination into an immediate
// SIGKILL), before anything is acquired.
func (o *cmdOpts) check() error {
	if o.killAfter < 0 {
		return usageErr("--kill-after %s: give a duration of 0 or more", o.killAfter)
	}
	if o.contain == containAuto {
		return nil
	}
	for _, m := range containModes {
		if o.contain == m {
			return nil
		}
	}
	return usageErr("--contain %q: give auto or one of %s (those this platform has)", o.contain, strings.Join(containModes, ", "))
}

// checkTTL refuses a --ttl the library would refuse (below MinTTL), before
// the connection; with zeroDefault (elect) 0 is the library's default TTL.
func checkTTL(ttl time.Duration, zeroDefault bool) error {
	if ttl == 0 && zeroDefault {
		return nil
	}
	if ttl < sentinel.MinTTL {
		return usageErr("invalid TTL: --ttl must be at least MinTTL (%s), got %s", sentinel.MinTTL, ttl)
	}
	return nil
}

// errNoCommand refuses a "--" with nothing after it (a script's `-- $CMD`
// with CMD empty): lock, elect and queue lock would hold until
// interrupted, which a cron job never is.
func errNoCommand(cmd *cobra.Command) error {
	return usageErr("nothing after --: give the command to run after it, or leave -- out to hold until interrupted (see '%s --help')", cmd.CommandPath())
}

// dashNames are the commands that take a name (or names) and a command
// after --, with the word the help calls the name.
var dashNames = map[string]string{"sentinel lock": "KEY", "sentinel elect": "GROUP", "sentinel queue lock": "RESOURCE"}

// dashNameHint says how cmd (lock, elect, queue lock) takes a name that
// reads as a flag; "" for other commands.
func dashNameHint(cmd *cobra.Command) string {
	what, ok := dashNames[cmd.CommandPath()]
	if !ok {
		return ""
	}
	return fmt.Sprintf("a %s that starts with - goes after a first --, the command after a second: %s -- -%s -- CMD (see '%s --help')",
		what, cmd.CommandPath(), strings.ToLower(what[:1]), cmd.CommandPath())
}

// splitNamed splits the arguments of lock and elect into the one name
// (KEY, GROUP) and the command. A name that reads as a flag goes after a
// first "--" and the command after a second one (`lock -- -k -- CMD`, as
// the command lines sentinel prints have it). The command is only what
// follows "--", as for queue lock (whose words before it are all
// RESOURCEs): words after the name without "--" are refused, with the
// command line that runs them, since a flag among them would have been
// taken for one of sentinel's own (`lock k1 job --ttl 5s` would run job
// without its --ttl) or refused as unknown.
func (a *app) splitNamed(cmd *cobra.Command, args []string) (string, []string, error) {
	d := cmd.ArgsLenAtDash()
	what := strings.ToUpper(strings.Fields(cmd.Use)[1])
	if d > 1 {
		return "", nil, usageErr("%s takes one %s before --, got %d", cmd.Name(), what, d)
	}
	name, command := args[0], args[1:]
	if d == 0 && len(command) > 0 && command[0] == "--" {
		command, d = command[1:], 1
	}
	if d <= 0 && len(command) > 0 {
		// The line to run: NAME -- CMD, or -- NAME -- CMD for a name
		// after a first "--" (one that reads as a flag).
		line := a.againSplit(cmd, []string{name}, command, true, nil)
		if d == 0 {
			line = a.againSplit(cmd, nil, append([]string{name, "--"}, command...), true, nil)
		}
		return "", nil, usageErr("%s runs a command only after --, and takes one %s before it (got %d words); to run it:\n  %s\n(the flags before -- are %s's own)",
			cmd.Name(), what, len(args), line, cmd.Name())
	}
	if d == 1 && len(command) == 0 {
		return "", nil, errNoCommand(cmd)
	}
	return name, command, nil
}

// containHelp is the part of lock's help that says how CMD's process tree
// is stopped; elect's and queue lock's point to it (guardPointer).
const containHelp = `

CMD and everything it starts stop before the lock can pass to anyone else.
A small supervising process (sentinel re-executed) starts CMD in a process
group of its own and holds its whole tree in a container, the first of
these the system allows (--contain names one and fails if it is refused):

  pid-namespace  Linux: a PID namespace whose init is the supervisor (with
                 a user namespace when sentinel is not root). However the
                 supervisor dies, the kernel kills every process in it, and
                 sentinel's wait for the supervisor ends only once all are
                 gone. CMD sees PIDs of that namespace and a /proc of its
                 own (ps shows its tree only); under a user namespace,
                 set-user-ID programs (sudo) gain no privileges.
  cgroup         Linux, where namespaces are refused and cgroup v2 is
                 delegated (writable): a cgroup of its own, emptied with
                 cgroup.kill; nothing started inside can leave it.
  process-group  Linux when both are refused, and every other Unix (macOS,
                 BSD): CMD's process group, best effort (auto prints a
                 warning when it comes to this on Linux): processes that
                 leave the group (setsid) are not followed.
  (Windows: CMD alone is killed; what it starts is not followed.)

What stops CMD's tree, and when (the lock is released only after):

  SIGINT/SIGTERM to sentinel,  SIGTERM to the tree, SIGKILL after
  SIGHUP (terminal closed),    --kill-after or at the local deadline
  SIGQUIT (Ctrl-\)             (under nohup SIGHUP stays ignored);
                               a second one: SIGKILL at once (exit 137);
                               while waiting: exit 4, nothing ran
  lease lost: taken over       SIGKILL at once (exit 137)
  lease lost: renewals late    SIGTERM min(--kill-after, TTL/4) before the
                               local deadline, SIGKILL at it (TTL/10 before
                               the row expires on the database clock)
  CMD exits, work left behind  SIGTERM, then SIGKILL within a second
  SIGKILL of sentinel          pid-namespace: the kernel, at once (the
                               supervisor's parent-death signal is SIGKILL);
                               else the supervisor, at once (parent-death
                               signal, control pipe's end); the lock
                               expires one TTL later
  SIGKILL of the supervisor    pid-namespace: the kernel, at once; cgroup,
                               process-group: sentinel kills what is left
                               and waits until none of it is alive
  SIGKILL of both              pid-namespace: the kernel, at once.
  (killall -9 sentinel)        cgroup, process-group: NOTHING stops the tree;
                               the lock expires one TTL later and only the
                               fencing token protects writes after that
  Ctrl-Z (SIGTSTP to the job)  the supervisor stops the tree (SIGSTOP) and
                               stays awake: it kills the tree at the local
                               deadline; on SIGCONT (fg) it asks sentinel,
                               which verifies the lock against the database,
                               and resumes the tree only if it is still
                               held, else kills it (exit 137)
  SIGSTOP of every process     nothing runs, nothing renews; on SIGCONT the
                               tree runs again at once, and the supervisor
                               kills it within about 20 ms if the local
                               deadline passed: in that window, and in any
                               pause of every process, only the fencing
                               token protects writes

The token (SENTINEL_LEASE_TOKEN, SENTINEL_ELECTION_TERM, the tickets of
SENTINEL_QUEUE_TICKETS) is the one protection that survives every event:
check it in the writes the work makes (VerifyToken, VerifyTerm,
VerifyTurn). CMD is not in the terminal's foreground: Ctrl-C reaches it
through sentinel (as SIGTERM), and it cannot read from the terminal: when
sentinel's stdin is one, CMD's is /dev/null opened for writing (as nohup
does), so a read fails at once instead of stopping CMD for good (give it
its input from a file or a pipe). SENTINEL_CONTAINMENT in its
environment names the containment in use.`

// guardPointer is elect's and queue lock's share of containHelp.
const guardPointer = `

CMD and everything it starts stop before the %s passes to anyone else:
'sentinel lock --help' shows how (the same --contain modes) and, for each
event (SIGTERM, SIGKILL of sentinel or of its supervisor, Ctrl-Z, SIGSTOP,
a lost %s), what stops CMD's tree and when.`

// quitIsInterrupt makes SIGQUIT (Ctrl-\) one more interrupt of cmd (lock,
// elect, queue lock) until stop is called: waiting, it gives up what it
// queued for (exit 4); holding, it ends the command as SIGINT does (its
// tree gets SIGTERM and --kill-after's grace, then the release). Left to
// the Go runtime, SIGQUIT ends sentinel with a dump of its goroutines and
// exit 2, the command killed without its grace by its supervisor's
// parent-death signal and what was held kept for one more TTL.
func quitIsInterrupt(cmd *cobra.Command) (stop func()) {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGQUIT)
	cmd.SetContext(ctx)
	return stop
}

// held is what a command runs under: a lease, a leadership term, or a set
// of queue turns.
type held interface {
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
	// Deadline is the local time until which the holder may trust what it
	// holds (zero: unknown now); the command's tree is killed by then.
	Deadline() time.Time
	// Verify checks with the database that it is still held (renewing it
	// where it can): nil if so, an error matching ErrLeaseLost or
	// ErrStaleToken if it is gone, another error when the database could
	// not tell.
	Verify(ctx context.Context) error
}

// leaseHeld is a lease as something a command runs under; Verify renews.
type leaseHeld struct{ *sentinel.Lease }

func (h leaseHeld) Verify(ctx context.Context) error { return h.Heartbeat(ctx) }

// runHeld runs command with env added while h is held, under a
// supervising process (guard_unix.go) that holds its process tree in the
// container o.contain names, and releases h only once the whole tree is
// gone. An interrupt sends SIGTERM to the tree, then SIGKILL after
// o.killAfter or at h's local deadline, whichever is first; a second
// interrupt sends SIGKILL at once. Late renewals
// send SIGTERM min(killAfter, ttl/4) before the deadline and SIGKILL at it;
// a loss (taken over, or the deadline passed) sends SIGKILL at once. A
// tree stopped by SIGTSTP resumes on SIGCONT only once h.Verify said it is
// still held. The result carries the command's exit code (never 0 after a
// loss).
func (a *app) runHeld(ctx context.Context, h held, what string, env, command []string, o cmdOpts, ttl time.Duration) error {
	lateGrace := min(o.killAfter, ttl/4)
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
	g, err := a.startGuard(command, env, h.Deadline(), lateGrace, o)
	if err != nil {
		return &codeError{code: startCode(err), err: err}
	}
	var lost error
	// deadlinePassed records the supervisor's news that the local
	// deadline passed (it killed the tree).
	deadlinePassed := func() {
		if lost == nil {
			lost = errDeadlinePassed
			fprintf(a.stderr, "sentinel: %s: %v; killed %s and everything it started\n", what, lost, command[0])
		}
	}
	done, interrupted := h.Done(), ctx.Done()
	// Every interrupt, counted: the first is ctx's (SIGTERM and the
	// grace), a second one (Ctrl-C again) kills the tree at once rather
	// than wait out --kill-after.
	interrupts := make(chan os.Signal, 2)
	signal.Notify(interrupts, append(interruptSignals(), syscall.SIGQUIT)...)
	defer signal.Stop(interrupts)
	nInterrupts := 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	// verified carries the answers to the supervisor's questions after a
	// SIGCONT: is h still held?
	verified := make(chan error, 1)
	verifying, askAgain := false, false
	ask := func() {
		verifying = true
		go func() { verified <- verifyHeld(ctx, h) }()
	}
wait:
	for {
		select {
		case <-g.exited():
			break wait
		case <-done:
			done = nil
			// Someone else may hold it already: no grace.
			g.kill()
			if ctx.Err() == nil && lost == nil { // not an interrupt that ended h as well
				lost = h.Err()
				fprintf(a.stderr, "sentinel: %s lost (%s); killed %s and everything it started\n", what, lossText(lost), command[0])
			}
		case <-interrupted:
			interrupted = nil
			g.terminate(o.killAfter)
		case <-interrupts:
			if nInterrupts++; nInterrupts == 2 {
				g.kill()
				fprintf(a.stderr, "sentinel: interrupted again; killed %s and everything it started\n", command[0])
			}
		case <-g.wake:
			for _, ev := range g.events() {
				switch ev.kind {
				case evAsk:
					if verifying {
						askAgain = true
					} else {
						ask()
					}
				case evLate:
					fprintf(a.stderr, "sentinel: renewals of %s are late; terminating %s before the local deadline\n", what, command[0])
				case evDeadline:
					deadlinePassed()
				}
			}
		case err := <-verified:
			verifying = false
			switch {
			case err == nil:
				g.deadline(h.Deadline())
				g.resume()
				fprintf(a.stderr, "sentinel: continued: %s is still held; resumed %s\n", what, command[0])
			default:
				g.kill()
				if lost == nil {
					lost = err
					fprintf(a.stderr, "sentinel: continued, but %s is no longer held (%v); killed %s and everything it started\n", what, err, command[0])
				}
			}
			if askAgain {
				askAgain = false
				ask()
			}
		case <-tick.C:
			g.deadline(h.Deadline())
		}
	}
	code := g.wait()
	// The tree's end and the news that ended it can be ready together
	// (sentinel was stopped with its tree, and the supervisor killed the
	// tree at the deadline meanwhile): the select above takes either
	// first. What it left is read here, so that a loss is never reported
	// as the command's own exit.
	for _, ev := range g.events() {
		if ev.kind == evDeadline {
			deadlinePassed()
		}
	}
	if done != nil && lost == nil && ctx.Err() == nil {
		select {
		case <-done:
			lost = h.Err()
			fprintf(a.stderr, "sentinel: %s lost (%s) as %s ended\n", what, lossText(lost), command[0])
		default:
		}
	}
	if sig, ok := g.supervisorKilled(); ok {
		fprintf(a.stderr, "sentinel: the supervisor of %s was killed by signal %d (%v); %s\n", command[0], int(sig), sig, g.afterSupervisorDeath())
	}
	if lost == nil {
		if err := h.Release(context.WithoutCancel(ctx)); err != nil && errors.Is(err, sentinel.ErrLeaseLost) {
			// Lost between the tree's end and the release: the work may
			// have overlapped another holder.
			lost = err
		}
	}
	if lost != nil {
		if code == 0 {
			code = exitError
		}
		return &codeError{code: code, err: &lossError{msg: fmt.Sprintf("%s was lost while %s ran (%s)", what, command[0], lossText(lost)), err: lost}}
	}
	if code != 0 {
		return &codeError{code: code}
	}
	return nil
}

// lossText is what a loss says after what names what was lost ("lease
// NS/KEY"): a lease's LostError without the lease it names again, else
// the error without the package prefix.
func lossText(err error) string {
	if le, ok := err.(*sentinel.LostError); ok {
		// "sentinel: lease|leadership of group|turn on NS/KEY (... N) lost: REST"
		msg := le.Error()
		if i := strings.Index(msg, ") lost: "); i >= 0 {
			label := "token"
			switch le.Kind {
			case sentinel.LossLeader:
				label = "term"
			case sentinel.LossTicket:
				label = "ticket"
			}
			return fmt.Sprintf("%s %d: %s", label, le.Token, msg[i+len(") lost: "):])
		}
	}
	return strings.TrimPrefix(err.Error(), "sentinel: ")
}

// lossError is a loss as reported: msg, matching err (errors.Is).
type lossError struct {
	msg string
	err error
}

func (e *lossError) Error() string { return e.msg }
func (e *lossError) Unwrap() error { return e.err }

// errDeadlinePassed is the loss the supervisor reports when the local
// deadline passed: nothing renewed what the command ran under in time.
var errDeadlinePassed = fmt.Errorf("the local deadline passed without a renewal (sentinel stopped, frozen or cut off from the database): %w", sentinel.ErrLeaseLost)

// verifyHeld asks the database whether h is still held, retrying while it
// cannot tell until h's local deadline (by then the supervisor has killed
// the stopped tree anyway). nil means held.
func verifyHeld(ctx context.Context, h held) error {
	vctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), h.Deadline())
	defer cancel()
	for {
		select {
		case <-h.Done():
			return h.Err()
		default:
		}
		err := h.Verify(vctx)
		if err == nil || errors.Is(err, sentinel.ErrLeaseLost) || errors.Is(err, sentinel.ErrStaleToken) {
			return err
		}
		select {
		case <-vctx.Done():
			return fmt.Errorf("could not verify before the local deadline: %w", err)
		case <-h.Done():
			return h.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// verifyInTx runs a Verify* check in a short transaction of its own (the
// row lock it takes ends with it).
func (a *app) verifyInTx(ctx context.Context, check func(tx pgx.Tx) error) error {
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return check(tx)
}

// Exit codes of a command that could not be started, as a shell's: not
// found, or found but not executable.
const (
	exitNotExecutable = 126
	exitCmdNotFound   = 127
)

// startCode is the exit code for err, the failure to start a command: 126
// when it was found but cannot be executed (no execute permission, a
// directory, not a format this system runs), else 127 (not found, or a
// supervisor that could not be started).
func startCode(err error) int {
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOEXEC) ||
		errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ETXTBSY) {
		return exitNotExecutable
	}
	return exitCmdNotFound
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
