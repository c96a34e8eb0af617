package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// Plain list (no --uncertain, no --rerun-pending) marks an HTTP request's
// key rerun pending for longer than --rerun-pending-after NEEDS AN
// OPERATOR, and followed each other key it marks with its inspect line,
// but printed nothing for the HTTP one: the operator was left with the
// derived key (idempotency:N:scope:key), which the idempotency commands do
// not take. It now prints the key's idempotency inspect line, carrying
// the threshold, as list --rerun-pending does, which prints the resolve
// step; a fresh HTTP key, not marked, gets no line.
func TestListPrintsIdempotencyInspectOfStaleHTTPKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.rerunPendingAged(pay, idempotency.ExecutionKey("cus 1", "k-old"))
	e.rerunPending(pay, idempotency.ExecutionKey("cus 1", "k-new"))

	r := e.run("list", "--rerun-pending-after", "10m", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "rerun pending, needs an operator")
	line := findCommand(t, r.stderr, "sentinel idempotency inspect ")
	require.Equal(t, "sentinel idempotency inspect k-old --scope 'cus 1' -n payments --rerun-pending-after 10m --schema "+e.schema, line)
	require.NotContains(t, r.stderr, "inspect k-new", r.stderr)
	require.NotContains(t, r.stderr, "sentinel inspect ", r.stderr)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `no repeat of the request came back`, p.stdout)
	require.Contains(t, findCommand(t, p.stdout, "sentinel idempotency resolve"), " --scope 'cus 1' -n payments ")

	// The same line as list --rerun-pending prints for it.
	q := e.run("list", "--rerun-pending", "--rerun-pending-after", "10m", "-n", "payments")
	requireCode(t, q, exitOK)
	require.Contains(t, q.stderr, "  "+line+"\n", q.stderr)

	// At the default, nothing is marked and no line is printed.
	r = e.run("list", "-n", "payments")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "needs an operator")
	require.NotContains(t, r.stderr, "inspect", r.stderr)
}
