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

// An Idempotency-Key whose handler stopped with re-runs left
// (Options.Rerun) is not uncertain: the client's repeat of the request
// runs it again, and `idempotency list` (--json "uncertain": false,
// "rerun_pending": true) and `list --uncertain` leave it out. `idempotency
// inspect` said "uncertain": true with --json and offered to resolve and
// reconcile it, which stops the re-run the application asked for. It now
// agrees with the listings.
func TestIdempotencyInspectOfARerunPendingKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, idempotency.ExecutionKey("cus_1", "k-1"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("idempotency", "list", "--json")
	requireCode(t, r, exitOK)
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Keys, 1, r.stdout)
	require.Equal(t, false, list.Keys[0]["uncertain"], r.stdout)
	require.Equal(t, true, list.Keys[0]["rerun_pending"], r.stdout)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1", "--json")
	requireCode(t, r, exitOK)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	require.Equal(t, false, rec["uncertain"], r.stdout)
	require.Equal(t, true, rec["rerun_pending"], r.stdout)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.Empty(t, printedCommands(r.stdout), r.stdout)
	require.Contains(t, r.stdout, "rerun pending: attempt 1 of 3 stopped, the client's repeat of the request runs attempt 2", r.stdout)
}

// A request whose handler stopped with re-runs left, and whose client never
// repeated it (it gave up), is paged by status --exit-code once its lease
// ended more than 15m ago, as for any rerun pending key. `sentinel
// inspect` of the execution then prints the reconcile step
// (TestInspectRerunPendingPrintsReconcile), but `idempotency inspect` of
// the request's key went on saying "the next caller with WithRerun runs
// it again" with no step at all. It now prints the steps of an uncertain
// key, each runnable as printed, once the key is as old as status pages
// on.
func TestIdempotencyInspectOfAStaleRerunPendingKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, idempotency.ExecutionKey("cus_1", "k-1"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '20 minutes', updated_at = updated_at - interval '20 minutes'")
	require.NoError(t, err)
	requireCode(t, e.run("status", "--exit-code"), exitAttention)

	// sentinel inspect of the execution points to the request's key, as
	// for an uncertain one.
	r := e.run("inspect", idempotency.ExecutionKey("cus_1", "k-1"))
	requireCode(t, r, exitOK)
	require.Equal(t, "sentinel idempotency inspect k-1 --scope cus_1 --schema "+e.schema,
		findCommand(t, r.stdout, "sentinel idempotency inspect"))

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.Regexp(t, `next: its lease ended 20m\d+s ago and no repeat of the request came back to run attempt 2 of 3`, r.stdout)
	require.Equal(t, "sentinel idempotency resolve k-1 --scope cus_1 --token 1 --schema "+e.schema,
		findCommand(t, r.stdout, "sentinel idempotency resolve"))
	line := findCommand(t, r.stdout, "sentinel reconcile")
	p := runPrinted(t, line, "y\n")
	requireCode(t, p, exitOK)
	ex, err := e.client.Inspect(ctxT(t), idempotency.ExecutionKey("cus_1", "k-1"))
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)
}
