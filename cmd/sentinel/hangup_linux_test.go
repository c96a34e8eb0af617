//go:build linux

package main

import (
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
