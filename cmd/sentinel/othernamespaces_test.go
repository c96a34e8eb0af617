package main

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// status --namespace named other namespaces only for their uncertain
// keys: an operator paged by status --exit-code (every namespace) for a
// key reconciling too long, or a result not stored, in namespace
// "billing", who then looked at "payments" with -n, was not told of
// "billing". It now names every other namespace holding what --exit-code
// pages on, with its counts by kind and the command that shows every
// namespace (carrying the thresholds given), and --json lists them in
// "needs_operator_in_other_namespaces".
func TestStatusNamespaceNamesOtherNamespacesNeedingAnOperator(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay, bill := e.newClient("payments"), e.newClient("billing")
	e.uncertainKey(pay, "order-1")
	e.uncertainKey(bill, "inv-recon")
	_, err := bill.Reconcile(ctxT(t), "inv-recon")
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '45 minutes' WHERE key = 'inv-recon'")
	require.NoError(t, err)

	// Reconciling for 45 minutes: not past the default hour.
	r := e.run("status", "-n", "payments")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "other namespaces too", r.stdout)

	r = e.run("status", "-n", "payments", "--reconciling-after", "30m")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `keys that need an operator in other namespaces too (what status --exit-code pages on): "billing" (1 reconciling for more than 30m); every namespace:`, r.stdout)
	printed := findCommand(t, r.stdout, "sentinel status")
	require.Contains(t, printed, "--reconciling-after 30m")
	all := runPrinted(t, printed, "")
	requireCode(t, all, exitOK)
	require.Contains(t, all.stdout, "billing", all.stdout)

	j := e.run("status", "-n", "payments", "--reconciling-after", "30m", "--json")
	requireCode(t, j, exitOK)
	var out struct {
		Others []attentionJSON `json:"needs_operator_in_other_namespaces"`
	}
	require.NoError(t, json.Unmarshal([]byte(j.stdout), &out), j.stdout)
	require.Len(t, out.Others, 1, j.stdout)
	require.Equal(t, "billing", out.Others[0].Namespace)
	require.Equal(t, attentionReconciling, out.Others[0].Kind)
	require.Equal(t, int64(1), out.Others[0].Count)

	// Asked for billing: payments' uncertain key is named as before, and
	// billing's own key is not "another namespace's".
	r = e.run("status", "-n", "billing", "--reconciling-after", "30m")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "uncertain executions in other namespaces too: payments (1)", r.stdout)
	require.NotContains(t, r.stdout, "keys that need an operator in other namespaces too", r.stdout)
}
