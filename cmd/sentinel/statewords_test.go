package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// status and list show UNCERTAIN, "rerun pending" and "RESULT NOT
// STORED" in their STATE column, but --state takes only the library's
// four states: an operator who typed --state UNCERTAIN from the table got
// "give claimed, executing, reconciling or completed", which does not
// lead to --uncertain. The refusal (exit 2, before connecting) now names
// the flag that lists them, with the command line, runnable as printed.
func TestStateWordsFromTheTablesLeadToTheirFlags(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "pay-1")

	for _, c := range []struct {
		args []string
		line string
	}{
		{[]string{"list", "--state", "UNCERTAIN"}, "sentinel list --uncertain --schema " + e.schema},
		{[]string{"list", "pay-", "--state", "rerun pending", "-n", "payments"}, "sentinel list pay- --namespace payments --rerun-pending --schema " + e.schema},
		{[]string{"list", "--state", "result_lost"}, "sentinel list --result-lost --schema " + e.schema},
		{[]string{"idempotency", "list", "--state", "uncertain"}, "sentinel idempotency list --uncertain --schema " + e.schema},
	} {
		r := e.run(c.args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "give claimed, executing, reconciling or completed", "%v", c.args)
		require.NotContains(t, r.stderr, "sentinel: database", "%v: refused before connecting", c.args)
		require.Equal(t, c.line, findCommand(t, r.stderr, "sentinel "), "%v", c.args)
		p := runShell(t, c.line)
		requireCode(t, p, exitOK)
	}
	p := runShell(t, "sentinel list --uncertain --schema "+e.schema)
	require.Contains(t, p.stdout, "pay-1")

	// A word that is no state nor flag: the refusal as before.
	r := e.run("list", "--state", "bogus")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, `--state "bogus": give claimed, executing, reconciling or completed`)
	require.Empty(t, printedCommands(r.stderr))
}
