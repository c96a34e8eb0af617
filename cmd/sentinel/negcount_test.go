package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// follow, observe and queue follow with a negative --count (a script's
// "--count $((N-1))" with N=0) exit 2 at once, before connecting, instead
// of following until interrupted, which a script never does.
func TestNegativeCountIsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"follow", "--count", "-1"},
		{"observe", "scheduler", "--count", "-1"},
		{"queue", "follow", "printer", "--count", "-2"},
	} {
		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // it followed until interrupted
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(cleanEnv(), "DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2")
		out, _ := cmd.CombinedOutput()
		cancel()
		require.Equal(t, exitUsage, cmd.ProcessState.ExitCode(), "%v: %s", args, out)
		require.Contains(t, string(out), "--count", "%v", args)
		require.Contains(t, string(out), "give 0 (until interrupted) or more", "%v", args)
		require.NotContains(t, string(out), "following", "%v", args)
	}
}
