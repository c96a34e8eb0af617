//go:build linux

package main

import (
	"path/filepath"
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
