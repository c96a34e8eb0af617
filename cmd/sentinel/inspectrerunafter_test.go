package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// inspect judged a rerun pending key stale (an operator's case: it
// prints the steps) by a fixed 15m, while status --exit-code and
// idempotency inspect take --rerun-pending-after: an operator paged at
// 10m got no step from inspect. inspect now takes the flag, with the same
// default, validation and meaning, and the idempotency inspect line it
// prints for an HTTP request's key carries it, so the copied command
// judges the key as inspect did.
func TestInspectRerunPendingAfter(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPendingAged(e.newClient("payments"), "order-7", idempotency.ExecutionKey("cus 1", "k-1"))

	// The default is status's 15m, and 1h is longer: not stale, no step.
	for _, extra := range [][]string{nil, {"--rerun-pending-after", "1h"}} {
		r := e.run(append([]string{"inspect", "order-7", "-n", "payments"}, extra...)...)
		requireCode(t, r, exitOK)
		require.Empty(t, printedCommands(r.stdout), "%v: %s", extra, r.stdout)
	}

	// At 10m it is an operator's case, as status --exit-code pages on.
	r := e.run("status", "--exit-code", "--rerun-pending-after", "10m", "-n", "payments")
	requireCode(t, r, exitAttention)
	r = e.run("inspect", "order-7", "-n", "payments", "--rerun-pending-after", "10m")
	requireCode(t, r, exitOK)
	require.Regexp(t, `next: its lease ended 12m\d+s ago and no caller with WithRerun came back to run attempt 2 of 3`, r.stdout)
	p := runPrinted(t, findCommand(t, r.stdout, "sentinel reconcile"), "y\n")
	requireCode(t, p, exitOK)

	// An HTTP request's key: the idempotency inspect line carries the
	// threshold, and the copied command prints the steps.
	r = e.run("inspect", idempotency.ExecutionKey("cus 1", "k-1"), "-n", "payments", "--rerun-pending-after", "10m")
	requireCode(t, r, exitOK)
	line := findCommand(t, r.stdout, "sentinel idempotency inspect")
	require.Equal(t, "sentinel idempotency inspect k-1 --scope 'cus 1' -n payments --rerun-pending-after 10m --schema "+e.schema, line)
	p = runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `next: its lease ended 12m\d+s ago and no repeat of the request came back`, p.stdout)
	// At the default, the line has no flag (and inspect no step).
	r = e.run("inspect", idempotency.ExecutionKey("cus 1", "k-1"), "-n", "payments")
	requireCode(t, r, exitOK)
	require.Empty(t, printedCommands(r.stdout), r.stdout)

	// As status and idempotency inspect, 0 or less is bad input.
	for _, d := range []string{"0s", "-5m"} {
		r = e.run("inspect", "order-7", "-n", "payments", "--rerun-pending-after", d)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--rerun-pending-after \S+: give a duration of more than 0 \(such as 15m\)`, r.stderr)
		require.Contains(t, r.stderr, "sentinel inspect --help")
	}

	h := e.run("inspect", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending-after")
	require.Contains(t, h.stdout, "sentinel inspect payment-order-789 -n payments --rerun-pending-after 1h")
}
