package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve --new-token prints a token and exits without a database; serve
// accepts it, and refuses phrases however long, saying how to make one.
func TestServeNewToken(t *testing.T) {
	r := runBin(t, nil, nil, "serve", "--new-token")
	requireCode(t, r, exitOK)
	tok := strings.TrimSpace(r.stdout)
	require.Len(t, tok, 43)
	require.NotEqual(t, tok, strings.TrimSpace(runBin(t, nil, nil, "serve", "--new-token").stdout))

	e := newEnv(t)
	e.migrate()
	for _, phrase := range []string{
		"sentinel-console-operator-token",
		"correct-horse-battery-staple-2024",
		"ThisIsOurProductionConsoleToken",
	} {
		r := runBin(t, []string{"DATABASE_URL=" + dbURL, "SENTINEL_OPERATOR_TOKEN=" + phrase}, nil,
			"--schema", e.schema, "serve", "--addr", "127.0.0.1:0")
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "looks made, not drawn at random", phrase)
		require.Contains(t, r.stderr, "sentinel serve --new-token", phrase)
		require.Empty(t, r.stdout, "nothing listened")
	}

	file := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(file, []byte(tok+"\n"), 0o600))
	cmd, _, out, stderr := e.start("serve", "--addr", "127.0.0.1:0", "--operator-token-file", file)
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.Contains(t, line, "listening on http://127.0.0.1:")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}
