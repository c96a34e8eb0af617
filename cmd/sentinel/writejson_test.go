package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// reconcile --json prints the execution as JSON, but the steps that follow
// it, force-complete, set-result and reset, ignored --json and printed a
// sentence on stdout: a script piping them into jq failed to parse it.
// With --json they now print the execution as it is after the change.
func TestResolutionStepsPrintJSON(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "pay-1")
	e.uncertainKey(e.client, "pay-2")
	for _, k := range []string{"pay-1", "pay-2"} {
		r := e.run("reconcile", k, "--yes", "--json")
		requireCode(t, r, exitOK)
		var ex execJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex), r.stdout)
	}

	r := e.run("force-complete", "pay-1", `{"charge_id":"ch_1"}`, "--yes", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex), r.stdout)
	require.Equal(t, "completed", string(ex.State))
	require.JSONEq(t, `{"charge_id":"ch_1"}`, string(ex.Result))

	r = e.run("set-result", "pay-1", `{"charge_id":"ch_2"}`, "--yes", "--json")
	requireCode(t, r, exitOK)
	ex = execJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex), r.stdout)
	require.JSONEq(t, `{"charge_id":"ch_2"}`, string(ex.Result))

	r = e.run("reset", "pay-2", "--yes", "--json")
	requireCode(t, r, exitOK)
	ex = execJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex), r.stdout)
	require.Equal(t, "claimed", string(ex.State))
	require.Equal(t, "pay-2", ex.Key)
}
