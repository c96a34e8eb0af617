package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// sentinel serve had no --rerun-pending-after: the console judged a key
// rerun pending stale after a fixed 15m (console.DefaultRerunPendingAfter)
// while status --exit-code, inspect and idempotency list took the
// operator's threshold, so a key status paged on at 10m was not on the
// console's start page. serve now takes the flag (the same check as the
// others) and hands it to console.Options.RerunPendingAfter.
func TestServeRerunPendingAfter(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPendingAged(e.newClient("mail"), "receipt-old")

	page := func(args ...string) string {
		t.Helper()
		cmd, _, out, stderr := e.start(append([]string{"serve", "--addr", "127.0.0.1:0", "--read-only"}, args...)...)
		line, err := out.ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr)
		resp, err := http.Get(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		http.DefaultClient.CloseIdleConnections()
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
		return string(body)
	}
	// The default, 15m: 12 minutes needs no operator yet.
	body := page()
	require.Contains(t, body, "Rerun pending, needs an operator (for more than 15m) <small>(0)")
	require.NotContains(t, body, `data-key="receipt-old"`)
	// At 10m it does: the start page lists it under that heading.
	body = page("--rerun-pending-after", "10m")
	require.Contains(t, body, "Rerun pending, needs an operator (for more than 10m) <small>(1)")
	require.Contains(t, body, `data-key="receipt-old"`)

	for _, d := range []string{"0s", "-5m"} {
		r := e.run("serve", "--read-only", "--rerun-pending-after", d)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--rerun-pending-after \S+: give a duration of more than 0 \(such as 15m\)`, r.stderr)
		require.Contains(t, r.stderr, "sentinel serve --help")
	}
	h := e.run("serve", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending-after")
}
