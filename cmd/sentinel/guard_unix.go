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
	"syscall"
	"time"
)

// The command run by lock, elect and queue lock is guarded by a small
// supervising process: the sentinel binary re-executed in a hidden mode
// (superviseArg). The supervisor starts the command in a process group of
// its own and kills that whole group, grandchildren included:
//
//   - when sentinel asks (interrupt: SIGTERM, then SIGKILL after a grace;
//     lost lease: SIGKILL at once);
//   - at the lease's local deadline, which sentinel forwards after every
//     renewal; when renewals are late it sends SIGTERM lateGrace before
//     the deadline and SIGKILL at it, so a frozen sentinel cannot keep the
//     work running either;
//   - when sentinel dies in any way (SIGKILL, OOM kill): the control pipe
//     reaches EOF and, on Linux, the parent-death signal arrives;
//   - when the command itself exits: whatever it left running in its
//     group is stopped before sentinel releases the lease.
//
// The supervisor exits with the command's code once the group is empty.

// superviseArg is argv[1] of the hidden supervising mode.
const superviseArg = "__sentinel-supervise"

// guard is a running supervisor, seen from sentinel.
type guard struct {
	sup    *exec.Cmd
	ctrl   *os.File // write end of the control pipe
	done   chan struct{}
	err    error // the supervisor's Wait error, once done
	sentDL time.Time
}

// startGuard starts the supervisor for command with env added, the
// lease's current deadline, and the grace before it in which late
// renewals terminate the command.
func (a *app) startGuard(command, env []string, deadline time.Time, lateGrace time.Duration) (*guard, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the sentinel binary to supervise %s: %w", command[0], err)
	}
	ctrlR, ctrlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	args := append([]string{superviseArg, strconv.FormatInt(int64(lateGrace), 10),
		strconv.FormatInt(int64(time.Until(deadline)), 10), "--"}, command...)
	sup := exec.Command(self, args...)
	sup.Stdin, sup.Stdout, sup.Stderr = a.stdin, a.stdout, a.stderr
	sup.Env = append(os.Environ(), env...)
	sup.ExtraFiles = []*os.File{ctrlR} // fd 3
	sup.SysProcAttr = supervisorAttr()
	g := &guard{sup: sup, ctrl: ctrlW, done: make(chan struct{}), sentDL: deadline}
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
		close(g.done)
	}()
	err = <-started
	_ = ctrlR.Close()
	if err != nil {
		_ = ctrlW.Close()
		return nil, fmt.Errorf("start the supervisor of %s: %w", command[0], err)
	}
	return g, nil
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

// kill asks for SIGKILL of the whole group now.
func (g *guard) kill() { g.send("K") }

// wait waits for the supervisor and returns the command's exit code.
func (g *guard) wait() int {
	<-g.done
	_ = g.ctrl.Close()
	return childCode(g.sup, g.err)
}

// Exited is closed once the supervisor (and so the whole group) is gone.
func (g *guard) exited() <-chan struct{} { return g.done }

// ---- the supervising process ----

// supervise is the hidden mode's main: args are lateGrace, the initial
// remaining time to the deadline (ns), "--" and the command. It returns
// the exit code.
func supervise(args []string) int {
	runtime.LockOSThread() // the command's parent-death signal follows this thread
	if len(args) < 4 || args[2] != "--" {
		fmt.Fprintln(os.Stderr, "sentinel: internal supervising mode; not for direct use")
		return exitUsage
	}
	lateGrace, err1 := strconv.ParseInt(args[0], 10, 64)
	remaining, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, "sentinel: internal supervising mode; not for direct use")
		return exitUsage
	}
	ctrl := os.NewFile(3, "sentinel-control")
	syscall.CloseOnExec(3)
	s := &supervisor{lateGrace: time.Duration(lateGrace), deadline: time.Now().Add(time.Duration(remaining))}
	return s.run(ctrl, args[3:])
}

type supervisor struct {
	lateGrace time.Duration
	deadline  time.Time // the lease's local deadline, as last forwarded
	killAt    time.Time // set by a terminate request
	pgid      int
	termSent  bool
	killSent  bool
}

func (s *supervisor) run(ctrl *os.File, command []string) int {
	becomeSubreaper()
	// Signals meant for sentinel: the terminal's SIGINT reaches sentinel,
	// which asks for a termination with its grace. Notify (not Ignore),
	// so the command does not inherit an ignored SIGINT.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "sentinel: start %s: %v\n", command[0], err)
		return 127
	}
	s.pgid = cmd.Process.Pid
	pid := cmd.Process.Pid

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
		// Reap every child: the command, and (as subreaper on Linux) any
		// orphan of its tree.
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
			if !groupAlive(s.pgid) {
				return code
			}
			// The command exited but left work running in its group: it
			// stops before the lease is released.
			if !s.termSent {
				s.signalGroup(syscall.SIGTERM)
				s.setKillAt(time.Now().Add(min(s.lateGrace, time.Second)))
			}
		}
		now := time.Now()
		switch {
		case s.killSent:
			if groupAlive(s.pgid) { // again: a fork may have raced the first SIGKILL
				_ = syscall.Kill(-s.pgid, syscall.SIGKILL)
			}
		case !now.Before(s.deadline):
			fmt.Fprintf(os.Stderr, "sentinel: the lease's local deadline passed; killing %s and everything it started\n", command[0])
			s.signalGroup(syscall.SIGKILL)
		case !s.killAt.IsZero() && !now.Before(s.killAt):
			s.signalGroup(syscall.SIGKILL)
		case !s.termSent && !now.Before(s.deadline.Add(-s.lateGrace)):
			fmt.Fprintf(os.Stderr, "sentinel: lease renewals are late; terminating %s before the lease's local deadline\n", command[0])
			s.signalGroup(syscall.SIGTERM)
		}
		select {
		case m, ok := <-msgs:
			if !ok { // sentinel is gone: nothing guards the work any more
				s.signalGroup(syscall.SIGKILL)
				msgs = nil
				continue
			}
			s.handle(m)
		case sig := <-sigs:
			if sig != syscall.SIGINT { // SIGINT is sentinel's to handle
				s.signalGroup(syscall.SIGKILL)
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
		s.signalGroup(syscall.SIGTERM)
		s.setKillAt(time.Now().Add(time.Duration(n)))
	case "K":
		s.signalGroup(syscall.SIGKILL)
	}
}

func (s *supervisor) setKillAt(t time.Time) {
	if s.killAt.IsZero() || t.Before(s.killAt) {
		s.killAt = t
	}
}

// signalGroup signals the command's whole process group (SIGTERM at most
// once).
func (s *supervisor) signalGroup(sig syscall.Signal) {
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
	_ = syscall.Kill(-s.pgid, sig)
}

// groupAlive reports whether any process is left in group pgid.
func groupAlive(pgid int) bool {
	return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
}

// waitCode is a wait status as an exit code: the process's own, or
// 128+N when signal N ended it.
func waitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
