//go:build linux

package main

import (
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Under nohup (SIGHUP ignored), a hangup of the job (the terminal closed,
// the login shell passing SIGHUP on to its jobs) leaves the command
// running: its tree inherits the ignored SIGHUP, as nohup asked.
func TestNohupCommandSurvivesAHangup(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	work := filepath.Join(sharedTempDir(t), "work")
	nohup := &jobSetup{wrap: []string{"sh", "-c", `trap "" HUP; exec "$@"`, "sh"}}
	first, out := startJob(t, nil, nohup, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
		"--schema", e.schema, "lock", "job", "--ttl", "4s", "--", "sh", "-c", writerScript)
	waitUntil(t, 20*time.Second, "the command's writes", func() bool { return fileHasLine(work) }, out)

	require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGHUP))
	time.Sleep(time.Second)
	n := lineCount(work)
	waitUntil(t, 5*time.Second, "the tree writing after the hangup", func() bool { return lineCount(work) > n+2 }, out)
	require.True(t, treeAlive(work), "output: %s", out)

	require.NoError(t, first.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 128+int(syscall.SIGTERM), exitCodeOf(t, first), "output: %s", out)
	require.False(t, treeAlive(work))
}

// A hangup of the job (its terminal closed: SIGHUP to the foreground
// process group) ends lock, elect and queue lock as SIGTERM does: the
// command gets SIGTERM and runs its trap, sentinel exits with its code and
// gives back what it held at once, not one TTL later.
func TestHangupTerminatesTheCommandAndReleases(t *testing.T) {
	// A test run that ignores SIGHUP (under nohup, as CI may be) would
	// pass that to sentinel, which then rightly leaves a hangup alone:
	// catching it here makes every command this test starts begin with
	// SIGHUP at its default, as from a terminal.
	defaultHangup(t)
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
			first, out := startJob(t, nil, nil, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
				append(append([]string{"--schema", e.schema}, k.args...), "--ttl", "30s", "--",
					"sh", "-c", `trap 'touch "$WORK.term"; exit 5' TERM; `+writerScript)...)
			waitUntil(t, 20*time.Second, "the command's writes", func() bool { return fileHasLine(work) }, out)

			require.NoError(t, syscall.Kill(-first.Process.Pid, syscall.SIGHUP))
			require.Equal(t, 5, exitCodeOf(t, first), "output: %s", out)
			require.True(t, exists(work+".term"), "the command got no SIGTERM; output: %s", out)
			require.False(t, treeAlive(work))
			r := e.run(k.free...)
			requireCode(t, r, k.code)
		})
	}
}

// defaultHangup catches SIGHUP in the test process for the test's
// duration, so that the processes it starts begin with SIGHUP at its
// default (an exec resets a caught signal, but keeps an ignored one).
func defaultHangup(t *testing.T) {
	t.Helper()
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(c) })
}
