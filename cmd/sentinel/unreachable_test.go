package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lock, elect, queue lock and follow keep waiting while the database is
// unreachable (the library retries), and now say so on stderr, once and
// not every second, with the error: before, they waited in silence
// without --verbose, and an operator took the silence for a lease held
// elsewhere or a quiet namespace.
func TestWaitingCommandsSayTheDatabaseIsUnreachable(t *testing.T) {
	for _, args := range [][]string{
		{"lock", "k1", "--", "true"},
		{"elect", "g1", "--", "true"},
		{"queue", "lock", "printer", "--", "true"},
		{"follow"},
	} {
		ctx, cancel := context.WithTimeout(ctxT(t), 4*time.Second)
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 5 * time.Second
		cmd.Env = append(cleanEnv(), "DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1")
		out, _ := cmd.CombinedOutput()
		cancel()
		require.Contains(t, string(out), "retrying", "%v: %s", args, out)
		require.Contains(t, string(out), "connection refused", "%v: %s", args, out)
		require.LessOrEqual(t, strings.Count(string(out), "retrying"), 2, "%v: a line per retry: %s", args, out)
	}
}

// A connection error lists each address pgx tried on a line of its own,
// indented with a tab: the error printer showed the tab as a literal \t
// ("\t127.0.0.1:1 (127.0.0.1): dial error"), where an operator reads an
// indent. Tabs inside a line are still escaped (see esc).
func TestConnectionErrorLinesAreIndentedNotEscaped(t *testing.T) {
	r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, "leases")
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, "connection refused")
	require.NotContains(t, r.stderr, `\t`, "a tab shown escaped: %s", r.stderr)
	require.Contains(t, r.stderr, "\n  127.0.0.1:1 (127.0.0.1): dial error", r.stderr)
}
