package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A key left in reconciling (an operator ran reconcile and never finished
// with force-complete or reset) fails every caller with ErrReconciling
// forever, and status --exit-code paged nobody for it: it pages once the
// key has been reconciling for longer than --reconciling-after (default
// 1h), on the database clock.
func TestStatusExitCodeReconcilingTooLong(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "pay-1")
	_, err := pay.Reconcile(ctxT(t), "pay-1")
	require.NoError(t, err)

	// Reconciling a moment ago: an operator is at it.
	r := e.run("status", "--exit-code")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "needs an operator")

	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '90 minutes' WHERE key = 'pay-1'")
	require.NoError(t, err)
	r = e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `sentinel: needs an operator (exit 5):`)
	require.Contains(t, r.stderr, `1 reconciling for more than 1h in namespace "payments"`)
	require.Contains(t, r.stderr, "ErrReconciling")
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list --state reconciling"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "pay-1")

	r = e.run("status", "--exit-code", "--json")
	requireCode(t, r, exitAttention)
	at := attentionOf(t, r)
	require.True(t, at.NeedsOperator)
	require.Equal(t, "1h0m0s", at.ReconcilingAfter)
	require.Len(t, at.Found, 1, r.stdout)
	require.Equal(t, attentionReconciling, at.Found[0].Kind)
	require.Equal(t, "payments", at.Found[0].Namespace)
	require.Equal(t, int64(1), at.Found[0].Count)
	require.NotNil(t, at.Found[0].Since)

	// The threshold, and the check's scope.
	requireCode(t, e.run("status", "--exit-code", "--reconciling-after", "2h"), exitOK)
	r = e.run("status", "--exit-code", "--reconciling-after", "30m")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 reconciling for more than 30m in namespace "payments"`)
	require.Contains(t, r.stderr, "sentinel list --state reconciling --older-than 30m -n payments")
	requireCode(t, e.run("status", "--exit-code", "-n", "mail"), exitOK)
	requireCode(t, e.run("status", "--exit-code", "-n", "payments"), exitAttention)
	requireCode(t, e.run("status"), exitOK) // without --exit-code, as before

	// Resolved: nothing to page.
	require.NoError(t, pay.ResetToClaimed(ctxT(t), "pay-1"))
	requireCode(t, e.run("status", "--exit-code", "--reconciling-after", "1m"), exitOK)
}

// The age is read on the database clock: an operator's laptop two hours
// ahead does not make a key reconciling for a moment page. (In process,
// where the local clock can be skewed.)
func TestStatusExitCodeReconcilingOnTheDatabaseClock(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "pay-1")
	_, err := e.client.Reconcile(ctxT(t), "pay-1")
	require.NoError(t, err)
	t.Cleanup(func() {
		localNow, clockRead, clockOnce, clockSkew = time.Now, nil, sync.Once{}, 0
	})
	localNow = func() time.Time { return time.Now().Add(2 * time.Hour) }
	clockRead, clockOnce, clockSkew = nil, sync.Once{}, 0
	var out, errb strings.Builder
	code := run(ctxT(t), []string{"--database-url", dbURL, "--schema", e.schema, "status", "--exit-code"}, nil, &out, &errb)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
}

// A bad --reconciling-after exits 2 before connecting, as a bad
// --rerun-pending-after does.
func TestStatusExitCodeReconcilingAfterBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--exit-code", "--reconciling-after", "-5m"},
		{"status", "--exit-code", "--reconciling-after", "0s"},
		{"status", "--exit-code", "--reconciling-after", "soon"},
		{"status", "--reconciling-after", "0s"}, // plain status names keys by it too
	} {
		r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:", "%v", args)
		require.Contains(t, r.stderr, "reconciling-after", "%v", args)
		require.NotContains(t, r.stderr, `database "none"`, "%v", args)
		require.Empty(t, r.stdout, "%v", args)
	}
	r := runBin(t, nil, nil, "status", "--help")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "--reconciling-after")
}
