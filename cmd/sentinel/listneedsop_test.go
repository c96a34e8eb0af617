package main

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status --exit-code pages on an uncertain key, a result not stored and a
// key reconciling too long, each with the list command that lists them,
// "inspect, then reconcile" (set-result, force-complete or reset). Run as
// printed, each list printed its table and nothing more for a key that is
// no HTTP request's (its --help promises each key needing an operator is
// followed by its inspect command): the operator copying commands at
// 3 a.m. had to type the inspect line themselves. list now follows each
// such key with its inspect command, which prints the step.
func TestListPrintsInspectOfEveryKeyNeedingAnOperator(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-unc")
	_, err := sentinel.Once(ctxT(t), pay, "refund-nan", func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	e.uncertainKey(pay, "order-recon")
	_, err = pay.Reconcile(ctxT(t), "order-recon")
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '90 minutes' WHERE key = 'order-recon'")
	require.NoError(t, err)

	s := e.run("status", "--exit-code")
	requireCode(t, s, exitAttention)
	for _, c := range []struct{ list, key, step string }{
		{"sentinel list --uncertain -n payments", "order-unc", "sentinel reconcile order-unc"},
		{"sentinel list --result-lost -n payments", "refund-nan", "sentinel set-result refund-nan"},
		{"sentinel list --state reconciling --older-than 1h -n payments", "order-recon", "sentinel force-complete order-recon"},
	} {
		r := runPrinted(t, findCommand(t, s.stderr, c.list), "")
		requireCode(t, r, exitOK)
		line := findCommand(t, r.stderr, "sentinel inspect ")
		require.Equal(t, "sentinel inspect "+c.key+" -n payments --schema "+e.schema, line, c.list)
		p := runPrinted(t, line, "")
		requireCode(t, p, exitOK)
		findCommand(t, p.stdout, c.step)
	}

	// A plain list names each too, by kind; a key that needs nobody
	// (completed, stored) gets no line.
	_, err = sentinel.Once(ctxT(t), pay, "order-ok", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	r := e.run("list")
	requireCode(t, r, exitOK)
	for _, key := range []string{"order-unc", "refund-nan", "order-recon"} {
		findCommand(t, r.stderr, "sentinel inspect "+key+" ")
	}
	require.NotContains(t, r.stderr, "order-ok")
	require.Contains(t, r.stderr, "1 of the keys listed is uncertain", r.stderr)
	require.False(t, strings.Contains(r.stderr, "1 of the keys listed are"), r.stderr)

	// An HTTP request's uncertain key, in a plain list: its idempotency
	// inspect line, and the note does not send it to reconcile.
	e.uncertainKey(pay, idempotency.ExecutionKey("cus 1", "k-1"))
	r = e.run("list")
	requireCode(t, r, exitOK)
	require.Equal(t, "sentinel idempotency inspect k-1 --scope 'cus 1' -n payments --schema "+e.schema,
		findCommand(t, r.stderr, "sentinel idempotency inspect"))
	require.Contains(t, r.stderr, "2 of the keys listed are uncertain", r.stderr)
	require.Contains(t, r.stderr, "an HTTP request's key is resolved with the response its retries get", r.stderr)
}
