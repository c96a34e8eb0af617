package main

import (
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A completed HTTP request's key whose response was not stored (every
// retry gets 500 ProblemNotStored) was paged on by status --exit-code
// with "inspect, then set-result", plain status said the same, and
// inspect of its execution printed a set-result line: set-result stores a
// value, which for the middleware's key must be its encoding of a
// response, fingerprint included; idempotency inspect printed no step,
// and idempotency resolve refused a completed key. Each now leads to
// idempotency inspect, which prints the idempotency resolve line, and
// resolve stores the response its retries get: run as printed, the retry
// gets it.
func TestHTTPResultLostLeadsToResolve(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	s := newShop(e, "shop")
	s.mode.Store("ok")
	body := `{"amount":500}`
	r := s.post(t, "cus_42", "k-1", body)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET result = NULL, result_error = 'response over Config.MaxResultSize' WHERE key = $1", idempotency.ExecutionKey("cus_42", "k-1"))
	require.NoError(t, err)
	r = s.post(t, "cus_42", "k-1", body)
	require.Equal(t, idempotency.ProblemNotStored, r.problem.Type, r.body)

	x := e.run("status", "--exit-code")
	requireCode(t, x, exitAttention)
	require.Contains(t, x.stderr, `1 completed with the result not stored in namespace "shop"`)
	require.Contains(t, x.stderr, "inspect, then resolve it with the response its retries get (an HTTP request's key)", x.stderr)
	require.NotContains(t, x.stderr, "set-result")
	st := e.run("status")
	requireCode(t, st, exitOK)
	require.Contains(t, st.stdout, "resolve it with the response its retries get (an HTTP request's key)", st.stdout)
	require.NotContains(t, st.stdout, "set-result")

	// The list --exit-code prints, then the idempotency inspect line it
	// prints, then the resolve line that prints: each as printed.
	l := runPrinted(t, findCommand(t, x.stderr, "sentinel list --result-lost"), "")
	requireCode(t, l, exitOK)
	require.NotContains(t, l.stderr, "or reset", "a completed key is not reset")
	in := findCommand(t, l.stderr, "sentinel idempotency inspect")
	require.Equal(t, "sentinel idempotency inspect k-1 --scope cus_42 -n shop --schema "+e.schema, in)
	i := runPrinted(t, in, "")
	requireCode(t, i, exitOK)
	require.Contains(t, i.stdout, "response was not stored")
	require.NotContains(t, i.stdout, "set-result")
	resolve := findCommand(t, i.stdout, "sentinel idempotency resolve")

	// sentinel inspect of its execution key leads there too.
	ins := e.run("inspect", idempotency.ExecutionKey("cus_42", "k-1"), "-n", "shop")
	requireCode(t, ins, exitOK)
	require.NotContains(t, ins.stdout, "set-result")
	require.Equal(t, in, findCommand(t, ins.stdout, "sentinel idempotency inspect"))

	res := runPrinted(t, resolve, "201\nContent-Type: application/json\n\n{\"charge_id\":\"ch_1\"}\n\ny\n")
	requireCode(t, res, exitOK)
	require.Contains(t, res.stdout, "now get 201 Created")
	r = s.post(t, "cus_42", "k-1", body)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, `{"charge_id":"ch_1"}`, r.body)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, s.runs.Load())
	requireCode(t, e.run("status", "--exit-code"), exitOK)

	// Stored: resolve refuses it again, as it refuses any completed key.
	again := runPrinted(t, resolve+" --status 200 --body '{}' --yes", "")
	requireCode(t, again, exitRefused)
}
