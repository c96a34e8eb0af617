package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Plain status lists the uncertain keys under "inspect, then reconcile",
// and names an HTTP request's with its idempotency inspect command, a
// stale rerun pending key with its inspect command; an uncertain key that
// is no HTTP request's got a table row and no command, so the operator
// copying commands had none to copy for the one kind every other view
// leads to. Each now gets its inspect line, which runs as printed and
// prints the reconcile step.
func TestStatusPrintsInspectOfEachUncertainKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("payments"), "order-unc")
	for _, args := range [][]string{{"status"}, {"status", "-n", "payments"}} {
		r := e.run(args...)
		requireCode(t, r, exitOK)
		line := findCommand(t, r.stdout, "sentinel inspect ")
		require.Equal(t, "sentinel inspect order-unc -n payments --schema "+e.schema, line, "%v", args)
		p := runPrinted(t, line, "")
		requireCode(t, p, exitOK)
		findCommand(t, p.stdout, "sentinel reconcile order-unc -n payments")
	}
}
