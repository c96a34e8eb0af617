package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status names the HTTP requests rerun pending whose lease ended more
// than --rerun-pending-after ago, each by scope and client's key, but
// only in its text: status --json, what monitoring reads, carried them
// nowhere (only "uncertain", whose executions carry an
// "idempotency_key"). It now carries them as "rerun_pending_http_requests"
// (executions with their "idempotency_key", at most --limit, then
// "more_rerun_pending_http_requests"), the same ones the text names.
func TestStatusJSONCarriesStaleRerunPendingHTTPRequests(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	pay := e.newClient("payments")
	for _, k := range []string{"k-1", "k-3"} {
		_, err := sentinel.Once(ctxT(t), pay, idempotency.ExecutionKey("cus 1", k), fail, sentinel.WithRerun(3))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	_, err := sentinel.Once(ctxT(t), pay, "order-7", fail, sentinel.WithRerun(3)) // not an HTTP request
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '20 minutes', updated_at = updated_at - interval '20 minutes'")
	require.NoError(t, err)
	// A young one: its client may still repeat the request.
	_, err = sentinel.Once(ctxT(t), pay, idempotency.ExecutionKey("cus 1", "k-2"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	type out struct {
		Rerun *[]execJSON `json:"rerun_pending_http_requests"`
		More  *bool       `json:"more_rerun_pending_http_requests"`
	}
	read := func(args ...string) out {
		t.Helper()
		r := e.run(args...)
		if len(args) > 1 && args[1] == "--exit-code" {
			requireCode(t, r, exitAttention)
		} else {
			requireCode(t, r, exitOK)
		}
		var o out
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &o), r.stdout)
		require.NotNil(t, o.Rerun, "%v: %s", args, r.stdout)
		require.NotNil(t, o.More, "%v: %s", args, r.stdout)
		return o
	}
	for _, args := range [][]string{{"status", "--json"}, {"status", "--exit-code", "--json"}, {"status", "-n", "payments", "--json"}} {
		o := read(args...)
		require.False(t, *o.More, "%v", args)
		var keys []string
		for _, x := range *o.Rerun {
			require.Equal(t, "payments", x.Namespace)
			require.True(t, x.Rerunnable, "%v", args)
			require.NotNil(t, x.IdempotencyKey, "%v", args)
			require.Equal(t, "cus 1", x.IdempotencyKey.Scope)
			keys = append(keys, x.IdempotencyKey.Key)
		}
		require.ElementsMatch(t, []string{"k-1", "k-3"}, keys, "%v", args)
	}
	o := read("status", "--limit", "1", "--json")
	require.Len(t, *o.Rerun, 1)
	require.True(t, *o.More)

	// Not stale enough: none, as the text names none.
	r := e.run("status", "--exit-code", "--rerun-pending-after", "1h", "--json")
	requireCode(t, r, exitOK)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, []any{}, st["rerun_pending_http_requests"], r.stdout)
	require.Equal(t, false, st["more_rerun_pending_http_requests"], r.stdout)

	h := e.run("status", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, `"rerun_pending_http_requests"`)
}
