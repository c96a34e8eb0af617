package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A request whose handler stopped with re-runs left (Options.Rerun) and
// whose client never repeated it is paged by status --exit-code once its
// lease ended more than --rerun-pending-after ago. status printed only
// `sentinel list --rerun-pending`, which lists the derived execution key
// (idempotency:5:cus_1:k-1), the wrong address for an HTTP request:
// uncertain requests get the idempotency inspect command, addressed by
// scope and client's key, which leads to resolve. A stale rerun pending
// request now gets it too, in status with and without --exit-code, and
// it runs as printed; a request still young enough for its client to
// come back gets none.
func TestStatusNamesStaleRerunPendingHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	pay := e.newClient("payments")
	_, err := sentinel.Once(ctxT(t), pay, idempotency.ExecutionKey("cus 1", "k-1"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), pay, "order-7", fail, sentinel.WithRerun(3)) // not an HTTP request
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '20 minutes', updated_at = updated_at - interval '20 minutes'")
	require.NoError(t, err)
	// A young one: its client may still repeat the request.
	_, err = sentinel.Once(ctxT(t), pay, idempotency.ExecutionKey("cus 1", "k-2"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	want := "sentinel idempotency inspect k-1 --scope 'cus 1' -n payments --schema " + e.schema
	for _, args := range [][]string{{"status", "--exit-code"}, {"status"}, {"status", "-n", "payments"}} {
		r := e.run(args...)
		if len(args) > 1 && args[1] == "--exit-code" {
			requireCode(t, r, exitAttention)
		} else {
			requireCode(t, r, exitOK)
		}
		require.Equal(t, want, findCommand(t, r.stdout, "sentinel idempotency inspect"), "%v", args)
		require.Contains(t, r.stdout, "1 HTTP request's Idempotency-Key (the idempotency middleware's) rerun pending, needs an operator", "%v", args)
		require.NotContains(t, r.stdout, "k-2", "%v", args)
	}

	p := runPrinted(t, want, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "no repeat of the request came back", p.stdout)
	require.Contains(t, findCommand(t, p.stdout, "sentinel idempotency resolve"), " --scope 'cus 1' -n payments ")

	// --rerun-pending-after 1h: not stale enough to page, nor to list.
	r := e.run("status", "--exit-code", "--rerun-pending-after", "1h")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "idempotency inspect", r.stdout)
}

// With more stale rerun pending requests than --limit, status ends its
// list with the command that lists every rerun pending key. Given another
// --rerun-pending-after, that line dropped it: run as printed, list judged
// the keys by the default 15m and marked none of those status had paged
// on as needing an operator.
func TestStatusMoreRerunPendingLineCarriesTheThreshold(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPendingAged(e.newClient("payments"), idempotency.ExecutionKey("cus 1", "k-1"), idempotency.ExecutionKey("cus 1", "k-2"))

	// Without --exit-code too: status lists the stale requests by the
	// threshold either way (it refused the flag without --exit-code).
	r := e.run("status", "--rerun-pending-after", "10m", "--limit", "1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "lease ended more than 10m ago", r.stdout)
	r = e.run("status", "--exit-code", "--rerun-pending-after", "10m", "--limit", "1", "-n", "payments")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stdout, "... more, among every rerun pending key", r.stdout)
	line := findCommand(t, r.stdout, "sentinel list --rerun-pending")
	require.Contains(t, line, " --rerun-pending-after 10m", line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Equal(t, 2, strings.Count(p.stdout, "rerun pending, needs an operator"), p.stdout)
}

// A key that is no HTTP request's, rerun pending with no caller coming
// back, is paged by status --exit-code once its lease ended more than
// --rerun-pending-after ago, but plain status named only such HTTP
// requests: its counts row said "rerun pending: nothing runs it until the
// next caller with WithRerun", and the operator who ran status without
// --exit-code saw nothing needing them. Status now names each such key
// with the inspect command that prints its steps, with and without
// --exit-code (--json: rerun_pending_keys); a young key gets none.
func TestStatusNamesStaleRerunPendingKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.rerunPendingAged(pay, "order-7") // 12 minutes
	e.rerunPending(pay, "order-8")     // young: its job may still be redelivered

	want := "sentinel inspect order-7 -n payments --rerun-pending-after 10m --schema " + e.schema
	for _, args := range [][]string{{"status", "--exit-code"}, {"status"}, {"status", "-n", "payments"}} {
		args = append(args, "--rerun-pending-after", "10m")
		r := e.run(args...)
		if args[1] == "--exit-code" {
			requireCode(t, r, exitAttention)
		} else {
			requireCode(t, r, exitOK)
		}
		require.Contains(t, r.stdout, "1 key rerun pending, needs an operator: lease ended more than 10m ago", "%v\n%s", args, r.stdout)
		require.Equal(t, want, findCommand(t, r.stdout, "sentinel inspect "), "%v", args)
		require.NotContains(t, r.stdout, "order-8", "%v", args)
	}
	p := runPrinted(t, want, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "rerun pending, needs an operator", p.stdout)
	require.Contains(t, findCommand(t, p.stdout, "sentinel reconcile"), "order-7")

	r := e.run("status", "--json", "--rerun-pending-after", "10m")
	requireCode(t, r, exitOK)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.RerunPendingKeys, 1, r.stdout)
	require.Equal(t, "order-7", st.RerunPendingKeys[0].Key)
	require.Empty(t, st.RerunPendingHTTP)
	require.False(t, st.MoreRerunPendingKeys)

	// The default 15m: not stale enough to name.
	r = e.run("status")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "sentinel inspect", r.stdout)
}
