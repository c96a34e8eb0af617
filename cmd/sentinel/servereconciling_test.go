package main

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// status --exit-code pages on a key reconciling for longer than
// --reconciling-after, but sentinel serve took no such flag: its console
// did not say which reconciling keys needed an operator, by any
// threshold. serve now takes it (the same default, 1h, and check as
// status's) and hands it to console.Options.ReconcilingAfter.
func TestServeReconcilingAfter(t *testing.T) {
	require.Equal(t, defaultReconcilingAfter, console.DefaultReconcilingAfter, "the console's default is status's")
	require.Equal(t, defaultRerunPendingAfter, console.DefaultRerunPendingAfter, "the console's default is status's")
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-recon")
	_, err := pay.Reconcile(ctxT(t), "order-recon")
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '45 minutes'")
	require.NoError(t, err)

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
	// The default, 1h: 45 minutes needs no operator yet.
	body := page()
	require.Contains(t, body, "Reconciling, needs an operator (for more than 1h) <small>(0)")
	// At 30m it does, as status --exit-code --reconciling-after 30m says.
	requireCode(t, e.run("status", "--exit-code", "--reconciling-after", "30m"), exitAttention)
	body = page("--reconciling-after", "30m")
	require.Contains(t, body, "Reconciling, needs an operator (for more than 30m) <small>(1)")
	require.Contains(t, body, "reconciling (needs an operator: for more than 30m)")

	for _, d := range []string{"0s", "-5m"} {
		r := e.run("serve", "--read-only", "--reconciling-after", d)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--reconciling-after \S+: give a duration of more than 0 \(such as 1h\)`, r.stderr)
		require.Contains(t, r.stderr, "sentinel serve --help")
	}
	h := e.run("serve", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--reconciling-after")
}
