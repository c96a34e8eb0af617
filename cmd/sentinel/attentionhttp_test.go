package main

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An HTTP request's key (the idempotency middleware's) is resolved with
// the response its retries get, or reset, never reconciled by hand; and
// a repeat of the request, not a caller with WithRerun, re-runs it.
// status --exit-code's lines said "no caller with WithRerun came back ...;
// inspect, then reconcile" for a namespace whose stale rerun pending keys
// were HTTP requests', and "inspect, then reconcile" for uncertain ones:
// the list they print leads to idempotency resolve, but the line's own
// advice was a Once key's. Each line now counts the HTTP requests' keys
// apart (--json: "http_requests") and says what to do with them.

// attentionLine is the line of status --exit-code's stderr that holds s.
func attentionLine(t *testing.T, stderr, s string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	t.Fatalf("no line with %q in:\n%s", s, stderr)
	return ""
}

func TestAttentionRerunPendingHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPendingAged(e.newClient("api"), idempotency.ExecutionKey("cus_1", "k-1"))
	e.rerunPendingAged(e.newClient("mixed"), "job-1", idempotency.ExecutionKey("cus_2", "k-2"))
	e.rerunPendingAged(e.newClient("jobs"), "job-2")

	r := e.run("status", "--exit-code", "--rerun-pending-after", "10m")
	requireCode(t, r, exitAttention)

	api := attentionLine(t, r.stderr, `in namespace "api"`)
	require.Contains(t, api, `1 rerun pending, needs an operator (no repeat of the request came back for more than 10m) in namespace "api"`)
	require.Contains(t, api, "; inspect, then resolve it with the response its retries get (an HTTP request's key; listed as \"executing (rerun pending, needs an operator: ")
	require.NotContains(t, api, "WithRerun")
	require.NotContains(t, api, "reconcile")

	mixed := attentionLine(t, r.stderr, `in namespace "mixed"`)
	require.Contains(t, mixed, `2 rerun pending, needs an operator (no caller with WithRerun, nor repeat of an HTTP request, came back for more than 10m) in namespace "mixed"`)
	require.Contains(t, mixed, "; inspect, then reconcile (1 of them is an HTTP request's key: resolve it with the response its retries get; listed as \"executing (rerun pending, needs an operator: ")

	jobs := attentionLine(t, r.stderr, `in namespace "jobs"`)
	require.Contains(t, jobs, `1 rerun pending, needs an operator (no caller with WithRerun came back for more than 10m) in namespace "jobs"`)
	require.Contains(t, jobs, "; inspect, then reconcile (listed as")
	require.NotContains(t, jobs, "HTTP")

	at := attentionOf(t, e.run("status", "--exit-code", "--json", "--rerun-pending-after", "10m"))
	got := map[string][2]int64{}
	for _, f := range at.Found {
		require.Equal(t, attentionRerunPending, f.Kind)
		got[f.Namespace] = [2]int64{f.Count, f.HTTPRequests}
	}
	require.Equal(t, map[string][2]int64{"api": {1, 1}, "mixed": {2, 1}, "jobs": {1, 0}}, got)
}

func TestAttentionUncertainHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("api"), idempotency.ExecutionKey("cus_1", "k-1"))
	e.uncertainKey(e.newClient("mail"), "mail-1")

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	api := attentionLine(t, r.stderr, `in namespace "api"`)
	require.Contains(t, api, `1 uncertain in namespace "api", lease ended `)
	require.Contains(t, api, "; inspect, then resolve it with the response its retries get (an HTTP request's key):")
	require.NotContains(t, api, "reconcile")
	mail := attentionLine(t, r.stderr, `in namespace "mail"`)
	require.Contains(t, mail, "; inspect, then reconcile:")

	at := attentionOf(t, e.run("status", "--exit-code", "--json"))
	require.Len(t, at.Found, 2, at)
	for _, f := range at.Found {
		want := map[string]int64{"api": 1, "mail": 0}[f.Namespace]
		require.Equal(t, want, f.HTTPRequests, f.Namespace)
	}
}

func TestAttentionReconcilingHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("api"), idempotency.ExecutionKey("cus_1", "k-1"))
	e.uncertainKey(e.newClient("api"), idempotency.ExecutionKey("cus_1", "k-2"))
	e.uncertainKey(e.newClient("refunds"), "refund-1")
	// Begun reconciling two hours ago and left so.
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET state = 'reconciling', updated_at = updated_at - interval '2 hours'")
	require.NoError(t, err)

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	api := attentionLine(t, r.stderr, `in namespace "api"`)
	require.Contains(t, api, `2 reconciling for more than 1h in namespace "api"`)
	require.Contains(t, api, "; inspect, then resolve each with the response its retries get (HTTP requests' keys):")
	require.NotContains(t, api, "force-complete")
	refunds := attentionLine(t, r.stderr, `in namespace "refunds"`)
	require.Contains(t, refunds, "; inspect, then force-complete (the work happened) or reset (it did not):")
}
