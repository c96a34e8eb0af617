//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The command run by lock, elect and queue lock is guarded by a small
// supervising process: the sentinel binary re-executed in a hidden mode
// (superviseArg). The supervisor starts the command in a process group of
// its own, inside a container that holds the command's whole tree (a box,
// as sentinel sees it; a tree, as the supervisor does: guard_linux.go,
// guard_bsd.go), and kills that whole tree, grandchildren included:
//
//   - when sentinel asks (interrupt: SIGTERM, then SIGKILL after a grace;
//     lost lease: SIGKILL at once);
//   - at the lease's local deadline, which sentinel forwards after every
//     renewal; when renewals are late it sends SIGTERM lateGrace before
//     the deadline and SIGKILL at it, so a frozen or stopped sentinel
//     cannot keep the work running either;
//   - when sentinel dies in any way (SIGKILL, OOM kill): the control
//     pipe reaches EOF and, on Linux, the parent-death signal arrives (in
//     a PID namespace it is SIGKILL, and the kernel empties the namespace);
//   - when the command itself exits: whatever it left running in the tree
//     is stopped before sentinel releases the lease.
//
// SIGTSTP (Ctrl-Z) stops the tree (SIGSTOP) while the supervisor stays
// awake to kill it at the deadline; SIGCONT asks sentinel, which verifies
// the lease with the database, and the tree resumes only on its word.
//
// When the supervisor has exited, however it exited, sentinel kills what
// may be left of the tree and waits until none of it is alive (the box's
// drain) before it releases the lease: in a PID namespace the kernel has
// already done so by the time the supervisor can be waited for.
//
// Sentinel and the supervisor talk over two pipes: control lines from
// sentinel on the supervisor's fd 3 ("D ns": the deadline is ns from now;
// "T ns": terminate, SIGKILL after ns; "K": kill now; "C": resume the
// stopped tree), events from the supervisor on its fd 4 (see guardEvent).

// superviseArg is argv[1] of the hidden supervising mode.
const superviseArg = "__sentinel-supervise"

// box is one way of holding the command's tree together, seen from
// sentinel; boxes (guard_linux.go, guard_bsd.go) lists them.
type box interface {
	// name is the containment's name (--contain, SENTINEL_CONTAINMENT).
	name() string
	// attr is the supervisor's process attributes.
	attr() *syscall.SysProcAttr
	// arg tells the supervisor how its tree is held (see newTree).
	arg() string
	// drain runs once the supervisor has exited, however: it kills what
	// is left of the tree (pgid is the command's process group as the
	// supervisor reported it, 0 if unknown) and returns once none of it
	// is alive. slow is called once if that takes long.
	drain(pgid int, slow func())
	// afterDeath says what drain did when the supervisor was killed.
	afterDeath() string
	// close frees what the box holds (after drain, or a failed start).
	close()
}

// guard is a running supervisor, seen from sentinel.
type guard struct {
	sup    *exec.Cmd
	box    box
	ctrl   *os.File // write end of the control pipe
	done   chan struct{}
	err    error // the supervisor's Wait error, once done
	sentDL time.Time

	wake   chan struct{} // a value when events are waiting
	mu     sync.Mutex
	queued []guardEvent
	pgid   int           // the command's process group, once reported
	evEOF  chan struct{} // closed when the event pipe is at its end
}

// startGuard starts the supervisor for command with env added, the
// lease's current deadline, the grace before it in which late renewals
// terminate the command, and the containment o.contain names ("auto":
// the strongest this system allows, with a warning when only the process
// group is left).
func (a *app) startGuard(command, env []string, deadline time.Time, lateGrace time.Duration, o cmdOpts) (*guard, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the sentinel binary to supervise %s: %w", command[0], err)
	}
	var refusals []string
	for _, mk := range boxes(o.contain) {
		b, err := mk()
		if err != nil {
			refusals = append(refusals, err.Error())
			continue
		}
		g, err := a.startSupervisor(self, b, command, env, deadline, lateGrace, o.killAfter)
		if err != nil {
			b.close()
			refusals = append(refusals, fmt.Sprintf("%s: %v", b.name(), err))
			continue
		}
		if o.contain == containAuto && b.name() == containGroup && len(refusals) > 0 {
			fprintf(a.stderr, "sentinel: WARNING: %s runs contained by its process group only (%s). "+
				"Processes that leave the group (setsid) are not stopped, and if sentinel and its supervisor are both "+
				"SIGKILLed nothing stops the tree: the lock passes on one TTL later while it may still run, and only "+
				"the fencing token protects its writes. Allow user namespaces, or delegate a cgroup v2 subtree to this "+
				"user, for a kernel guarantee; 'sentinel lock --help' shows what each containment does.\n",
				command[0], strings.Join(refusals, "; "))
		}
		return g, nil
	}
	if o.contain == containAuto {
		return nil, fmt.Errorf("start the supervisor of %s: %s", command[0], strings.Join(refusals, "; "))
	}
	return nil, fmt.Errorf("--contain %s: refused on this system (%s); run with --contain auto to use the strongest containment it allows",
		o.contain, strings.Join(refusals, "; "))
}

// startSupervisor starts the supervisor in box b.
func (a *app) startSupervisor(self string, b box, command, env []string, deadline time.Time, lateGrace, killAfter time.Duration) (*guard, error) {
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		_, _ = ctrlR.Close(), ctrlW.Close()
		return nil, err
	}
	args := append([]string{superviseArg, b.arg(), strconv.FormatInt(int64(lateGrace), 10),
		strconv.FormatInt(int64(killAfter), 10), strconv.FormatInt(int64(time.Until(deadline)), 10), "--"}, command...)
	sup := exec.Command(self, args...)
	sup.Stdin, sup.Stdout, sup.Stderr = a.stdin, a.stdout, a.stderr
	sup.Env = append(append(os.Environ(), env...), envContainment+"="+b.name())
	sup.ExtraFiles = []*os.File{ctrlR, evW} // fd 3, fd 4
	sup.SysProcAttr = b.attr()
	g := &guard{sup: sup, box: b, ctrl: ctrlW, done: make(chan struct{}), sentDL: deadline,
		wake: make(chan struct{}, 1), evEOF: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the creating thread exits,
		// not the process: start and wait on one locked thread, which
		// lives as long as the supervisor.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := sup.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		g.err = sup.Wait()
		// Events written before the exit are read before the drain (they
		// carry the process group). The supervisor's end is close-on-exec,
		// so the pipe ends with it; the timeout only bounds a surprise.
		select {
		case <-g.evEOF:
		case <-time.After(time.Second):
		}
		g.mu.Lock()
		pgid := g.pgid
		g.mu.Unlock()
		b.drain(pgid, func() {
			fprintf(a.stderr, "sentinel: waiting for what is left of %s's process tree to exit before releasing\n", command[0])
		})
		b.close()
		close(g.done)
	}()
	err = <-started
	_, _ = ctrlR.Close(), evW.Close()
	if err != nil {
		_, _ = ctrlW.Close(), evR.Close()
		return nil, err
	}
	go g.readEvents(evR)
	return g, nil
}

// readEvents queues the supervisor's event lines until the pipe ends.
func (g *guard) readEvents(r *os.File) {
	defer close(g.evEOF)
	defer func() { _ = r.Close() }()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		ev, ok := parseEvent(sc.Text())
		if !ok {
			continue
		}
		g.mu.Lock()
		if ev.kind == evStarted {
			g.pgid = int(ev.n)
		} else {
			g.queued = append(g.queued, ev)
		}
		g.mu.Unlock()
		select {
		case g.wake <- struct{}{}:
		default:
		}
	}
}

// parseEvent reads one event line ("K N").
func parseEvent(line string) (guardEvent, bool) {
	f := strings.Fields(line)
	if len(f) != 2 || len(f[0]) != 1 {
		return guardEvent{}, false
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	return guardEvent{kind: f[0][0], n: n}, err == nil
}

// events takes the queued events.
func (g *guard) events() []guardEvent {
	g.mu.Lock()
	defer g.mu.Unlock()
	evs := g.queued
	g.queued = nil
	return evs
}

// send writes one control line; a supervisor already gone is not an error.
func (g *guard) send(format string, args ...any) {
	_, _ = fmt.Fprintf(g.ctrl, format+"\n", args...)
}

// deadline forwards the lease's local deadline when it moved.
func (g *guard) deadline(d time.Time) {
	if d.IsZero() || d.Equal(g.sentDL) {
		return
	}
	g.sentDL = d
	g.send("D %d", int64(time.Until(d)))
}

// terminate asks for SIGTERM now and SIGKILL after grace (or at the
// deadline, whichever comes first).
func (g *guard) terminate(grace time.Duration) { g.send("T %d", int64(grace)) }

// kill asks for SIGKILL of the whole tree now.
func (g *guard) kill() { g.send("K") }

// resume lets a tree stopped by SIGTSTP run again (the lease was verified).
func (g *guard) resume() { g.send("C") }

// wait waits for the supervisor (and the whole tree) and returns the
// command's exit code.
func (g *guard) wait() int {
	<-g.done
	_ = g.ctrl.Close()
	return childCode(g.sup, g.err)
}

// exited is closed once the supervisor and the whole tree are gone.
func (g *guard) exited() <-chan struct{} { return g.done }

// supervisorKilled reports the signal that ended the supervisor, if one
// did (it exits with the command's code otherwise). Call after wait.
func (g *guard) supervisorKilled() (syscall.Signal, bool) {
	if st := g.sup.ProcessState; st != nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal(), true
		}
	}
	return 0, false
}

// afterSupervisorDeath says what stopped the tree when the supervisor was
// killed.
func (g *guard) afterSupervisorDeath() string { return g.box.afterDeath() }

// drainGroup kills process group pgid until it is empty, reaping those of
// its members that became sentinel's children (Linux: sentinel is a
// subreaper when the group is all that holds the tree).
func drainGroup(pgid int, slow func()) {
	if pgid <= 1 || pgid == syscall.Getpgrp() {
		return // unknown (the command never started), or not the command's
	}
	start, noted := time.Now(), false
	for {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for {
			var ws syscall.WaitStatus
			if p, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil); p <= 0 || err != nil {
				break
			}
		}
		if groupGone(pgid) {
			return
		}
		if !noted && time.Since(start) > 2*time.Second {
			slow()
			noted = true
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// groupBox holds the tree by its process group only (best effort).
type groupBox struct{}

func (groupBox) name() string                { return containGroup }
func (groupBox) arg() string                 { return containGroup }
func (groupBox) drain(pgid int, slow func()) { drainGroup(pgid, slow) }
func (groupBox) close()                      {}
func (groupBox) afterDeath() string {
	return "sentinel killed what was left of its process group and waited for it (processes that left the group are not followed)"
}

// ---- the supervising process ----

// supervise is the hidden mode's main: args are the tree's description
// (box.arg), lateGrace, killAfter, the initial remaining time to the
// deadline (all in ns), "--" and the command. It returns the exit code.
func supervise(args []string) int {
	runtime.LockOSThread() // the command's parent-death signal follows this thread
	if len(args) < 6 || args[4] != "--" {
		fmt.Fprintln(os.Stderr, "sentinel: internal supervising mode; not for direct use")
		return exitUsage
	}
	var ns [3]int64
	for i := range ns {
		n, err := strconv.ParseInt(args[1+i], 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sentinel: internal supervising mode; not for direct use")
			return exitUsage
		}
		ns[i] = n
	}
	ctrl := os.NewFile(3, "sentinel-control")
	syscall.CloseOnExec(3)
	events := os.NewFile(4, "sentinel-events")
	syscall.CloseOnExec(4)
	t, err := newTree(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "sentinel: supervisor: %v\n", err)
		return exitCmdNotFound
	}
	s := &supervisor{tree: t, events: events, lateGrace: time.Duration(ns[0]), killAfter: time.Duration(ns[1]),
		deadline: time.Now().Add(time.Duration(ns[2]))}
	return s.run(ctrl, args[5:])
}

// tree is the command's process tree as the supervisor holds it.
type tree interface {
	// attr is the command's process attributes.
	attr() *syscall.SysProcAttr
	// started records the command's PID (its process group) and returns
	// that group as sentinel sees it (0: sentinel does not need it).
	started(pid int) int
	// signal sends sig to every process of the tree (not the supervisor).
	signal(sig syscall.Signal)
	// empty reports whether no process of the tree is alive (the
	// supervisor reaps its zombies first).
	empty() bool
}

type supervisor struct {
	tree      tree
	events    *os.File
	lateGrace time.Duration
	killAfter time.Duration
	deadline  time.Time // the lease's local deadline, as last forwarded
	killAt    time.Time // set by a terminate request
	termSent  bool
	killSent  bool
	paused    bool // stopped by SIGTSTP, waiting for sentinel's word
	asked     bool // SIGCONT came while paused: sentinel was asked
}

func (s *supervisor) run(ctrl *os.File, command []string) int {
	becomeSubreaper()
	// SIGINT comes from the terminal to sentinel as well, which asks for
	// a termination with its grace: noted here (not ignored, so the
	// command does not inherit an ignored SIGINT), nothing more. SIGTERM,
	// SIGHUP, SIGQUIT are forwarded to the tree as a termination; SIGHUP
	// only unless it is ignored (nohup): the tree inherits it ignored and
	// outlives the terminal, as nohup asked.
	sigs := make(chan os.Signal, 8)
	notified := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGCONT}
	if !signal.Ignored(syscall.SIGHUP) {
		notified = append(notified, syscall.SIGHUP)
	}
	signal.Notify(sigs, notified...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if isTerminal(os.Stdin) {
		// Out of the terminal's foreground, a read from it would stop the
		// command (SIGTTIN) for good, the lock held: as nohup does, its
		// stdin is /dev/null opened for writing, so a read fails at once.
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			defer func() { _ = null.Close() }()
			cmd.Stdin = null
		}
	}
	cmd.SysProcAttr = s.tree.attr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "sentinel: start %s: %v\n", command[0], err)
		return startCode(err)
	}
	pid := cmd.Process.Pid
	s.event(evStarted, int64(s.tree.started(pid)))

	msgs := make(chan string, 16)
	go func() {
		r := bufio.NewReader(ctrl)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if !errors.Is(err, io.EOF) || line == "" {
					close(msgs)
					return
				}
			}
			msgs <- strings.TrimSpace(line)
		}
	}()

	code := -1 // the command's code once reaped
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		// Reap every child: the command, and every orphan of its tree
		// (the supervisor is their subreaper, or their namespace's init).
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if p <= 0 || err != nil {
				break
			}
			if p == pid {
				code = waitCode(ws)
			}
		}
		if code >= 0 {
			if s.tree.empty() {
				return code
			}
			// The command exited but left work running in its tree: it
			// stops before the lease is released.
			if !s.termSent {
				s.signal(syscall.SIGTERM)
				s.setKillAt(time.Now().Add(min(s.lateGrace, time.Second)))
			}
		}
		now := time.Now()
		switch {
		case s.killSent:
			if !s.tree.empty() { // again: a fork may have raced the first SIGKILL
				s.tree.signal(syscall.SIGKILL)
			}
		case !now.Before(s.deadline):
			s.event(evDeadline, 0)
			s.signal(syscall.SIGKILL)
		case !s.killAt.IsZero() && !now.Before(s.killAt):
			s.signal(syscall.SIGKILL)
		case s.paused:
			// Again: a process forked while the first SIGSTOP went out
			// is stopped too. (A stopped tree is not terminated when
			// renewals are late: it is killed at the deadline.)
			s.tree.signal(syscall.SIGSTOP)
		case !s.termSent && !now.Before(s.deadline.Add(-s.lateGrace)):
			s.event(evLate, 0)
			s.signal(syscall.SIGTERM)
		}
		select {
		case m, ok := <-msgs:
			if !ok { // sentinel is gone: nothing guards the work any more
				s.signal(syscall.SIGKILL)
				msgs = nil
				continue
			}
			s.handle(m)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGINT:
			case syscall.SIGTSTP:
				// Ctrl-Z: the tree stops first; the supervisor stays awake
				// to kill it at the deadline, as sentinel stops too and
				// renews nothing.
				s.paused, s.asked = true, false
				s.tree.signal(syscall.SIGSTOP)
				s.event(evPaused, 0)
			case syscall.SIGCONT:
				if s.paused && !s.asked && !s.killSent {
					s.asked = true
					s.event(evAsk, 0)
				}
			default:
				s.signal(syscall.SIGTERM)
				s.setKillAt(time.Now().Add(s.killAfter))
			}
		case <-chld:
		case <-tick.C:
		}
	}
}

// handle applies one control line from sentinel.
func (s *supervisor) handle(m string) {
	f := strings.Fields(m)
	if len(f) == 0 {
		return
	}
	var n int64
	if len(f) > 1 {
		n, _ = strconv.ParseInt(f[1], 10, 64)
	}
	switch f[0] {
	case "D":
		s.deadline = time.Now().Add(time.Duration(n))
	case "T":
		s.signal(syscall.SIGTERM)
		s.setKillAt(time.Now().Add(time.Duration(n)))
	case "K":
		s.signal(syscall.SIGKILL)
	case "C":
		// Only the answer to the latest question resumes: a SIGTSTP
		// after it was asked needs a SIGCONT and a question of its own.
		if s.paused && s.asked && !s.killSent {
			s.paused, s.asked = false, false
			s.tree.signal(syscall.SIGCONT)
		}
	}
}

// event tells sentinel something; a sentinel already gone is not an
// error (the control pipe's end says so).
func (s *supervisor) event(kind byte, n int64) {
	_, _ = fmt.Fprintf(s.events, "%c %d\n", kind, n)
}

func (s *supervisor) setKillAt(t time.Time) {
	if s.killAt.IsZero() || t.Before(s.killAt) {
		s.killAt = t
	}
}

// signal signals the whole tree (SIGTERM at most once).
func (s *supervisor) signal(sig syscall.Signal) {
	switch sig {
	case syscall.SIGTERM:
		if s.termSent {
			return
		}
		s.termSent = true
	case syscall.SIGKILL:
		s.termSent, s.killSent = true, true
		s.killAt = time.Now()
	}
	s.tree.signal(sig)
}

// groupTree is a tree held by its process group only.
type groupTree struct{ pgid int }

func (t *groupTree) attr() *syscall.SysProcAttr { return commandAttr() }
func (t *groupTree) started(pid int) int        { t.pgid = pid; return pid }
func (t *groupTree) signal(sig syscall.Signal) {
	if t.pgid > 1 {
		_ = syscall.Kill(-t.pgid, sig)
	}
}
func (t *groupTree) empty() bool { return t.pgid <= 1 || groupGone(t.pgid) }

// groupGone reports whether no process is left in group pgid.
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// waitCode is a wait status as an exit code: the process's own, or
// 128+N when signal N ended it.
func waitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
