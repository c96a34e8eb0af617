package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An Idempotency-Key inspected without its --scope (copied from a client's
// log) or with the wrong one was not found, and the error named
// `sentinel idempotency list` to find the scope, without the schema the
// command ran on: run as printed it listed another schema (or none). The
// listing to run is now a command line of its own, with --schema, and
// runs as printed; a wrong --scope gets the same way to the right one.
func TestIdempotencyKeyWithoutItsScopeNamesTheListingToRun(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	srv.post(t, key, `{"amount":4200}`) // the handler panics: uncertain
	want := "sentinel idempotency list --schema " + e.schema
	for _, args := range [][]string{
		{"idempotency", "inspect", key, "-n", "payments"},
		{"idempotency", "inspect", key, "--scope", "acct_43", "-n", "payments"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitNotFound)
		require.Contains(t, r.stderr, "\n  "+want+"\n", "%v", args)
	}
	r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, strings.Fields(strings.TrimPrefix(want, "sentinel "))...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "acct_42")
	require.Contains(t, r.stdout, key)
}
