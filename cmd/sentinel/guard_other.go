//go:build !unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Outside Unix the command runs as a plain child (best effort): it is
// killed when the lease is lost or sentinel is interrupted, but what it
// starts itself, and the command after sentinel's own death, are not.

// containModes are the containments this platform has (besides auto).
var containModes = []string{containProcess}

type guard struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	wake chan struct{} // never: no supervisor, no events
}

func (a *app) startGuard(command, env []string, _ time.Time, _ time.Duration, _ cmdOpts) (*guard, error) {
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.Env = append(append(os.Environ(), env...), envContainment+"="+containProcess)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", command[0], err)
	}
	g := &guard{cmd: cmd, done: make(chan struct{})}
	go func() { g.err = cmd.Wait(); close(g.done) }()
	return g, nil
}

func (g *guard) deadline(time.Time)                       {}
func (g *guard) terminate(time.Duration)                  { _ = g.cmd.Process.Kill() }
func (g *guard) kill()                                    { _ = g.cmd.Process.Kill() }
func (g *guard) resume()                                  {}
func (g *guard) events() []guardEvent                     { return nil }
func (g *guard) exited() <-chan struct{}                  { return g.done }
func (g *guard) wait() int                                { <-g.done; return childCode(g.cmd, g.err) }
func (g *guard) supervisorKilled() (syscall.Signal, bool) { return 0, false }
func (g *guard) afterSupervisorDeath() string             { return "" }

// superviseArg is argv[1] of the hidden supervising mode (Unix only).
const superviseArg = "__sentinel-supervise"

func supervise([]string) int { return exitUsage }
