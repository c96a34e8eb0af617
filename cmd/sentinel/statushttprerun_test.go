package main

import (
	"context"
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
