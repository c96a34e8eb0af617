package main

import (
	"html"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A key rerun pending past --rerun-pending-after was "executing (rerun
// 2/3 pending: NEEDS AN OPERATOR, ...)" in list, "RERUN PENDING (needs an
// operator: ...)" in idempotency list, "rerun pending for more than 10m"
// in status and on the console, and "stopped at attempt 1 of 3" in
// inspect where list said "rerun 2/3": an operator who saw it in one did
// not find it by grepping another. Every view of the same key now says
// "rerun pending, needs an operator", and the views that count its
// attempts say "attempt 1 of 3 stopped", as inspect's attempt: row counts.
func TestRerunNeedsOperatorSameWordsEverywhere(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	const phrase, attempt = "rerun pending, needs an operator", "attempt 1 of 3 stopped"
	execKey := idempotency.ExecutionKey("cus 1", "k-old")
	e.rerunPendingAged(e.newClient("payments"), execKey)
	after := []string{"--rerun-pending-after", "10m"}

	cli := func(code int, args ...string) string {
		t.Helper()
		r := e.run(append(args, after...)...)
		requireCode(t, r, code)
		return r.stdout + r.stderr
	}
	console := func() string {
		t.Helper()
		cmd, _, out, stderr := e.start(append([]string{"serve", "--addr", "127.0.0.1:0", "--read-only"}, after...)...)
		line, err := out.ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr)
		base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")), "/")
		resp, err := http.Get(base + "/key?" + url.Values{"ns": {"payments"}, "key": {execKey}}.Encode())
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		http.DefaultClient.CloseIdleConnections()
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
		return html.UnescapeString(string(body))
	}
	for _, c := range []struct {
		view        string
		out         func() string
		withAttempt bool
	}{
		{"list", func() string { return cli(exitOK, "list") }, true},
		{"list --rerun-pending", func() string { return cli(exitOK, "list", "--rerun-pending") }, true},
		{"idempotency list", func() string { return cli(exitOK, "idempotency", "list") }, true},
		{"inspect", func() string { return cli(exitOK, "inspect", execKey, "-n", "payments") }, true},
		{"idempotency inspect", func() string {
			return cli(exitOK, "idempotency", "inspect", "k-old", "--scope", "cus 1", "-n", "payments")
		}, true},
		{"status", func() string { return cli(exitOK, "status") }, false},
		{"status --exit-code", func() string { return cli(exitAttention, "status", "--exit-code") }, false},
		{"console key page", console, true},
	} {
		out := c.out()
		require.Contains(t, out, phrase, "%s:\n%s", c.view, out)
		if c.withAttempt {
			require.Contains(t, out, phrase+": "+attempt, "%s:\n%s", c.view, out)
		}
		require.NotContains(t, out, "NEEDS AN OPERATOR", c.view)
		require.NotContains(t, out, "RERUN PENDING", c.view)
		require.NotRegexp(t, `rerun \d+/\d+`, out, c.view)
	}
}
