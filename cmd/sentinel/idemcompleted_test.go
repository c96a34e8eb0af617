package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A completed Idempotency-Key (a client says its retry got an odd
// response) could not be found with its scope: idempotency list showed
// only the keys not completed, and inspect without --scope sent the
// operator to that very listing. idempotency list --state completed now
// lists completed keys, each with its scope, in the table and --json, and
// inspect's not-found names that listing too.
func TestIdempotencyListShowsCompletedKeysWithTheirScope(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	const crashed = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	const done = "f00dfeed-0000-4000-8000-000000000042"
	srv.post(t, crashed, `{"amount":4200}`) // the handler panics: uncertain
	require.Equal(t, 201, srv.post(t, done, `{"amount":100}`).status)

	r := e.run("idempotency", "list", "--state", "completed")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, done)
	require.NotContains(t, r.stdout, crashed)
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, done) {
			line = l
		}
	}
	require.Contains(t, line, "acct_42", r.stdout)
	require.Contains(t, line, "completed", r.stdout)
	require.Contains(t, line, "POST", r.stdout)

	r = e.run("idempotency", "list", "--state", "completed", "--json")
	requireCode(t, r, exitOK)
	var out struct{ Keys []idemKeyJSON }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 1)
	require.Equal(t, "acct_42", out.Keys[0].Scope)
	require.Equal(t, done, out.Keys[0].Key)
	require.Equal(t, sentinel.StateCompleted, out.Keys[0].State)

	// Without --state: the keys not completed, as before.
	r = e.run("idempotency", "list")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, crashed)
	require.NotContains(t, r.stdout, done)
	r = e.run("idempotency", "list", "--state", "executing")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, crashed)

	// inspect without --scope names the listing that shows it.
	r = e.run("idempotency", "inspect", done, "-n", "payments")
	requireCode(t, r, exitNotFound)
	want := "sentinel idempotency list --state completed --schema " + e.schema
	require.Contains(t, r.stderr, "\n  "+want+"\n", r.stderr)

	requireCode(t, e.run("idempotency", "list", "--state", "bogus"), exitUsage)
	requireCode(t, e.run("idempotency", "list", "--state", "completed", "--uncertain"), exitUsage)
}
