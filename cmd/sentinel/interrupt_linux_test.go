//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SIGTERM (or Ctrl-C) to lock, elect and queue lock reaches the command as
// SIGTERM with --kill-after's grace: its trap runs to its end, and sentinel
// exits with the command's code.
func TestInterruptGivesTheCommandItsGrace(t *testing.T) {
	for _, k := range holdKinds {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.migrate()
			work := filepath.Join(sharedTempDir(t), "work")
			first, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
				append(append([]string{"--schema", e.schema}, k.args...), "--ttl", "10s", "--kill-after", "5s", "--",
					"sh", "-c", `trap 'sleep 0.3; touch "$WORK.term"; exit 5' TERM; `+writerScript)...)
			waitUntil(t, 20*time.Second, "the command's writes", func() bool { return fileHasLine(work) }, out)

			require.NoError(t, first.Process.Signal(syscall.SIGTERM))
			require.Equal(t, 5, exitCodeOf(t, first), "output: %s", out)
			require.True(t, exists(work+".term"), "the command's trap did not finish; output: %s", out)
			require.False(t, treeAlive(work))
		})
	}
}

// SIGQUIT (Ctrl-\ at the terminal) to lock, elect and queue lock while
// the command runs ends them as SIGTERM does: the command gets SIGTERM
// and its grace, sentinel exits with the command's code and gives back
// what it held at once. It used to end sentinel as the Go runtime ends a
// program on SIGQUIT: a dump of every goroutine, exit 2 (the code of a
// usage error), the command killed without its grace by its
// supervisor's parent-death signal, and the lock held for one more TTL.
func TestQuitTerminatesTheCommandAndReleases(t *testing.T) {
	for _, k := range []struct {
		name string
		args []string // the command up to its options
		free []string // a command that shows the lock free
		code int      // its exit code when it is
	}{
		{"lock", []string{"lock", "job"}, []string{"lock", "job", "--no-wait", "--", "true"}, 0},
		{"elect", []string{"elect", "group"}, []string{"leader", "group"}, exitNotFound},
		{"queue-lock", []string{"queue", "lock", "printer"}, []string{"queue", "lock", "printer", "--timeout", "2s", "--", "true"}, 0},
	} {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.migrate()
			work := filepath.Join(sharedTempDir(t), "work")
			first, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
				append(append([]string{"--schema", e.schema}, k.args...), "--ttl", "30s", "--kill-after", "5s", "--",
					"sh", "-c", `trap 'sleep 0.3; touch "$WORK.term"; exit 5' TERM; `+writerScript)...)
			waitUntil(t, 20*time.Second, "the command's writes", func() bool { return fileHasLine(work) }, out)

			require.NoError(t, first.Process.Signal(syscall.SIGQUIT))
			require.Equal(t, 5, exitCodeOf(t, first), "output: %s", out)
			require.True(t, exists(work+".term"), "the command's trap did not finish; output: %s", out)
			require.NotContains(t, out.String(), "goroutine", "a goroutine dump")
			require.False(t, treeAlive(work))
			r := e.run(k.free...)
			requireCode(t, r, k.code)
		})
	}
}

// SIGQUIT while waiting is an interrupt while waiting: exit 4, the
// command never ran, and what was queued for is given up.
func TestQuitWhileWaitingExits4(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	l, err := e.client.Lease(ctxT(t), "job")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()
	_, stop := e.runElector(e.client, "group")
	defer stop()
	turn, err := e.client.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = turn.Release(ctxT(t)) }()

	for _, args := range [][]string{{"lock", "job"}, {"elect", "group"}, {"queue", "lock", "printer"}} {
		ran := filepath.Join(t.TempDir(), "ran")
		cmd, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "RAN=" + ran},
			append(append([]string{"--schema", e.schema}, args...), "--", "sh", "-c", `touch "$RAN"`)...)
		waitUntil(t, 20*time.Second, "the connection", func() bool { return strings.Contains(out.String(), "sentinel: database") }, out)
		time.Sleep(300 * time.Millisecond) // waiting now
		require.NoError(t, cmd.Process.Signal(syscall.SIGQUIT))
		require.Equal(t, exitRefused, exitCodeOf(t, cmd), "%v: %s", args, out)
		require.Contains(t, out.String(), "interrupted", "%v", args)
		require.False(t, exists(ran), "%v: the command ran", args)
	}
	// The queue lock's ticket went with it: the next in line is first.
	require.NoError(t, turn.Release(ctxT(t)))
	r := e.run("queue", "lock", "printer", "--timeout", "2s", "--", "true")
	requireCode(t, r, 0)
}

// A second interrupt (Ctrl-C again) does not wait out --kill-after: the
// command's tree is killed at once, and the lock given back. The command
// here takes SIGTERM without exiting, and --kill-after is ten minutes.
func TestSecondInterruptKillsAtOnce(t *testing.T) {
	for _, k := range []struct {
		name string
		args []string // the command up to its options
		free []string // a command that shows the lock free
		code int      // its exit code when it is
	}{
		{"lock", []string{"lock", "job"}, []string{"lock", "job", "--no-wait", "--", "true"}, 0},
		{"elect", []string{"elect", "group"}, []string{"leader", "group"}, exitNotFound},
		{"queue-lock", []string{"queue", "lock", "printer"}, []string{"queue", "lock", "printer", "--timeout", "2s", "--", "true"}, 0},
	} {
		t.Run(k.name, func(t *testing.T) {
			e := newEnv(t)
			e.migrate()
			work := filepath.Join(sharedTempDir(t), "work")
			first, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
				append(append([]string{"--schema", e.schema}, k.args...), "--ttl", "30s", "--kill-after", "10m", "--",
					"sh", "-c", `trap 'touch "$WORK.term"' TERM; `+writerScript+`; while :; do sleep 1; done`)...)
			waitUntil(t, 20*time.Second, "the command's writes", func() bool { return fileHasLine(work) }, out)

			require.NoError(t, first.Process.Signal(syscall.SIGINT))
			waitUntil(t, 20*time.Second, "the command's SIGTERM trap", func() bool { return exists(work + ".term") }, out)
			require.True(t, treeAlive(work), "the command's tree ended on SIGTERM; output: %s", out)
			start := time.Now()
			require.NoError(t, first.Process.Signal(syscall.SIGINT))
			exited := make(chan error, 1)
			go func() { exited <- first.Wait() }()
			var err error
			select {
			case err = <-exited:
				t.Logf("exited %v after the second interrupt", time.Since(start).Round(time.Millisecond))
			case <-time.After(30 * time.Second):
				_ = first.Process.Kill()
				<-exited
				t.Fatalf("still running 30s after a second interrupt (--kill-after 10m); output: %s", out)
			}
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "output: %s", out)
			require.Equal(t, 128+int(syscall.SIGKILL), ee.ExitCode(), "output: %s", out)
			require.Contains(t, out.String(), "interrupted again")
			require.False(t, treeAlive(work))
			requireCode(t, e.run(k.free...), k.code)
		})
	}
}
