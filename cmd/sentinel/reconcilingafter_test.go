package main

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status --exit-code pages on a key reconciling for longer than
// --reconciling-after (default 1h), but list --json, inspect --json and
// idempotency list and inspect --json said "needs_operator": false for
// it, and took no --reconciling-after: a script selecting what needs an
// operator missed what the check paged on. Each now takes the flag, with
// the same default and meaning, marks such a key as needing an operator
// (--json and the state shown), and the lines printed carry the value
// when it is not the default, so the copied command judges the key as
// the one that printed it did.
func TestReconcilingAfterAgreesWithStatusExitCode(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	httpKey := idempotency.ExecutionKey("cus 1", "k-1")
	for _, k := range []string{"order-recon", "order-fresh", httpKey} {
		e.uncertainKey(pay, k)
		_, err := pay.Reconcile(ctxT(t), k)
		require.NoError(t, err)
	}
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '45 minutes' WHERE key <> 'order-fresh'")
	require.NoError(t, err)

	needs := func(args ...string) map[string]bool {
		t.Helper()
		r := e.run(args...)
		requireCode(t, r, exitOK)
		var page struct {
			Executions []listExecJSON `json:"executions"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
		out := map[string]bool{}
		for _, x := range page.Executions {
			out[x.Key] = x.NeedsOperator
		}
		return out
	}
	inspectNeeds := func(args ...string) bool {
		t.Helper()
		r := e.run(args...)
		requireCode(t, r, exitOK)
		var x struct {
			NeedsOperator bool `json:"needs_operator"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &x), r.stdout)
		return x.NeedsOperator
	}
	idemNeeds := func(args ...string) bool {
		t.Helper()
		r := e.run(args...)
		requireCode(t, r, exitOK)
		var page struct {
			Keys []idemKeyJSON `json:"keys"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
		require.Len(t, page.Keys, 1, r.stdout)
		return page.Keys[0].NeedsOperator
	}

	// Reconciling 45m: not past the default 1h, as status --exit-code.
	requireCode(t, e.run("status", "--exit-code"), exitOK)
	require.Equal(t, map[string]bool{"order-recon": false, "order-fresh": false, httpKey: false}, needs("list", "--json"))
	require.False(t, inspectNeeds("inspect", "order-recon", "-n", "payments", "--json"))

	// Past 30m: status --exit-code pages, and every view agrees.
	s := e.run("status", "--exit-code", "--reconciling-after", "30m")
	requireCode(t, s, exitAttention)
	require.Equal(t, map[string]bool{"order-recon": true, "order-fresh": false, httpKey: true},
		needs("list", "--json", "--reconciling-after", "30m"))
	require.True(t, inspectNeeds("inspect", "order-recon", "-n", "payments", "--json", "--reconciling-after", "30m"))
	require.False(t, inspectNeeds("inspect", "order-fresh", "-n", "payments", "--json", "--reconciling-after", "30m"))
	require.True(t, idemNeeds("idempotency", "list", "--json", "--reconciling-after", "30m"))
	require.False(t, idemNeeds("idempotency", "list", "--json"))
	require.True(t, inspectNeeds("idempotency", "inspect", "k-1", "--scope", "cus 1", "-n", "payments", "--json", "--reconciling-after", "30m"))
	require.False(t, inspectNeeds("idempotency", "inspect", "k-1", "--scope", "cus 1", "-n", "payments", "--json"))

	// The list status prints carries the threshold, and so does each
	// inspect line it prints; each runs as printed, and marks the key.
	line := findCommand(t, s.stderr, "sentinel list --state reconciling")
	require.Equal(t, "sentinel list --state reconciling --older-than 30m -n payments --reconciling-after 30m --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `order-recon\s+reconciling \(needs an operator: for more than 30m\)`, p.stdout)
	require.NotContains(t, p.stdout, "order-fresh")
	in := findCommand(t, p.stderr, "sentinel inspect order-recon")
	require.Equal(t, "sentinel inspect order-recon -n payments --reconciling-after 30m --schema "+e.schema, in)
	q := runPrinted(t, in, "")
	requireCode(t, q, exitOK)
	require.Contains(t, q.stdout, "reconciling (needs an operator: for more than 30m")
	findCommand(t, q.stdout, "sentinel force-complete order-recon")
	in = findCommand(t, p.stderr, "sentinel idempotency inspect k-1")
	require.Equal(t, "sentinel idempotency inspect k-1 --scope 'cus 1' -n payments --reconciling-after 30m --schema "+e.schema, in)
	q = runPrinted(t, in, "")
	requireCode(t, q, exitOK)
	require.Contains(t, q.stdout, "reconciling (needs an operator: for more than 30m")
	findCommand(t, q.stdout, "sentinel idempotency resolve k-1")

	// At the default, the lines carry no flag.
	r := e.run("list", "--state", "reconciling")
	requireCode(t, r, exitOK)
	require.Equal(t, "sentinel inspect order-recon -n payments --schema "+e.schema, findCommand(t, r.stderr, "sentinel inspect order-recon"))
	require.Regexp(t, `order-recon\s+reconciling\s`, r.stdout)

	// As --rerun-pending-after, 0 or less is bad input, before connecting.
	for _, args := range [][]string{
		{"list", "--reconciling-after", "0s"},
		{"inspect", "k", "--reconciling-after", "-5m"},
		{"idempotency", "list", "--reconciling-after", "0s"},
		{"idempotency", "inspect", "k", "--reconciling-after", "0s"},
	} {
		r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, args...)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--reconciling-after \S+: give a duration of more than 0 \(such as 1h\)`, r.stderr, "%v", args)
	}
}
