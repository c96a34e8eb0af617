package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// status lists an uncertain HTTP request's key (the idempotency
// middleware's) among the uncertain executions, as it lists Once keys,
// and says what it is: it prints, for each, the idempotency inspect
// command addressed by scope and client's key, which runs as printed and
// leads to resolve; --json carries the scope and key. Before, status
// showed only the derived execution key under "inspect, then reconcile",
// which leads to force-complete, the wrong tool for an HTTP request.
func TestStatusNamesUncertainHTTPKeys(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("mail"), "welcome-88")
	s := newShop(e, "payments")
	const account, key, body = "cus 42", "8e03978e-40d5", `{"amount":500}`
	r := s.post(t, account, key, body)
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type, r.body)

	out := e.run("status")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "1 of them is an HTTP request's Idempotency-Key (the idempotency middleware's)")
	inspect := findCommand(t, out.stdout, "sentinel idempotency inspect")
	require.Equal(t, "sentinel idempotency inspect "+key+" --scope 'cus 42' -n payments --schema "+e.schema, inspect)
	inspected := runPrinted(t, inspect, "")
	requireCode(t, inspected, exitOK)
	require.Contains(t, inspected.stdout, "UNCERTAIN")
	require.Contains(t, findCommand(t, inspected.stdout, "sentinel idempotency resolve"), " --scope 'cus 42' -n payments ")

	out = e.run("status", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Equal(t, inspect, findCommand(t, out.stdout, "sentinel idempotency inspect"))

	out = e.run("status", "--json")
	requireCode(t, out, exitOK)
	var st struct {
		Uncertain []execJSON `json:"uncertain"`
	}
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &st))
	require.Len(t, st.Uncertain, 2)
	for _, u := range st.Uncertain {
		if u.Key == "welcome-88" {
			require.Nil(t, u.IdempotencyKey)
			continue
		}
		require.Equal(t, &idemRefJSON{Scope: account, Key: key}, u.IdempotencyKey)
	}
}
