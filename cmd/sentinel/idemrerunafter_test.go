package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status --exit-code --rerun-pending-after 10m names an HTTP request
// rerun pending whose lease ended 12 minutes ago with its idempotency
// inspect command, but inspect judged it by a fixed 15m: the command
// copied from status said the client's repeat would still re-run it, and
// printed no step. inspect now takes --rerun-pending-after (default 15m,
// as status's), and the line status prints carries it when the operator
// gave another value, so the copied command agrees with status.
func TestIdempotencyInspectRerunPendingAfter(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.rerunPendingAged(e.newClient("payments"), idempotency.ExecutionKey("cus 1", "k-1"))

	// Paged at 10m: the copied command shows the steps.
	r := e.run("status", "--exit-code", "--rerun-pending-after", "10m")
	requireCode(t, r, exitAttention)
	line := findCommand(t, r.stdout, "sentinel idempotency inspect")
	require.Equal(t, "sentinel idempotency inspect k-1 --scope 'cus 1' -n payments --rerun-pending-after 10m --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `next: its lease ended 12m\d+s ago and no repeat of the request came back`, p.stdout)
	require.Contains(t, findCommand(t, p.stdout, "sentinel idempotency resolve"), " --scope 'cus 1' -n payments ")

	// The default is status's: not stale at 15m, no step.
	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus 1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Empty(t, printedCommands(r.stdout), r.stdout)
	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus 1", "-n", "payments", "--rerun-pending-after", "1h")
	requireCode(t, r, exitOK)
	require.Empty(t, printedCommands(r.stdout), r.stdout)

	// As status, a threshold of 0 or less is bad input.
	for _, d := range []string{"0s", "-5m"} {
		r = e.run("idempotency", "inspect", "k-1", "--scope", "cus 1", "-n", "payments", "--rerun-pending-after", d)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "--rerun-pending-after")
	}

	h := e.run("idempotency", "inspect", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending-after")
}
