package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An empty --namespace or --schema (a script's `-n "$NS"` with NS unset)
// is refused as bad input, exit 2, before anything is read or written.
// The library took "" for the default namespace and schema, so
// `list --uncertain -n ""` read only namespace "default" and said "no
// executions match in any namespace" (exit 0, `{"executions": []}` with
// --json) while another namespace held uncertain work; `reconcile -n ""`
// acted on "default" under a banner naming namespace "".
func TestEmptyNamespaceOrSchemaIsRefused(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-1")
	e.uncertainKey(e.client, "order-2") // in "default"

	for _, args := range [][]string{
		{"list", "--uncertain", "-n", ""},
		{"list", "--uncertain", "--json", "--namespace="},
		{"idempotency", "list", "--uncertain", "-n", ""},
		{"status", "-n", ""},
		{"status", "--json", "-n", ""},
		{"inspect", "order-2", "-n", ""},
		{"reconcile", "order-2", "-n", "", "--yes"},
		{"prune", "--older-than", "720h", "-n", "", "--yes"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "--namespace is empty", "%q", args)
		require.Empty(t, r.stdout, "%q", args)
	}
	r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, "inspect", "order-2", "--schema", "")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "--schema is empty")

	// Nothing was written: order-2 is still uncertain, not reconciling.
	got, err := e.client.Inspect(ctxT(t), "order-2")
	require.NoError(t, err)
	require.Equal(t, "executing", string(got.State))

	// Without -n the listing covers every namespace, as documented.
	r = e.run("list", "--uncertain")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "order-1")
	require.Contains(t, r.stdout, "order-2")
}
