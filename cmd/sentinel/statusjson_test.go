package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// status -n NS names the other namespaces with uncertain executions; so
// does its --json output, which a script reads instead of the text: it
// said nothing of them, as if nothing needed an operator.
func TestStatusJSONNamesOtherNamespaces(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "pay-1")
	e.uncertainKey(pay, "pay-2")

	text := e.run("status", "-n", "mail")
	requireCode(t, text, exitOK)
	require.Contains(t, text.stdout, "uncertain executions in other namespaces too: payments (2)")

	r := e.run("status", "-n", "mail", "--json")
	requireCode(t, r, exitOK)
	var st map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Empty(t, st["uncertain"])
	require.Equal(t, []any{map[string]any{"namespace": "payments", "count": float64(2)}}, st["uncertain_in_other_namespaces"], r.stdout)

	// Every namespace: nothing is elsewhere.
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	st = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st["uncertain"], 2)
	require.NotContains(t, st, "uncertain_in_other_namespaces")
}
