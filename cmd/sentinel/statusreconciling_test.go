package main

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A key left reconciling for more than an hour fails every caller with
// ErrReconciling until an operator finishes it: status --exit-code pages
// on it with its list command, but plain status showed only a counts row
// ("reconciling 1 ... (1h30m ago)") with no word that it needs an
// operator and no command, where it names every other kind (uncertain,
// result not stored, rerun pending past --rerun-pending-after). It now
// names the namespace with the list command --exit-code prints, which runs
// as printed and leads to inspect; a key reconciling a moment ago (an
// operator at it) gets none.
func TestStatusNamesKeysReconcilingTooLong(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-recon")
	_, err := pay.Reconcile(ctxT(t), "order-recon")
	require.NoError(t, err)
	e.uncertainKey(pay, "order-fresh")
	_, err = pay.Reconcile(ctxT(t), "order-fresh")
	require.NoError(t, err)

	r := e.run("status")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "sentinel list --state reconciling", r.stdout)

	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '90 minutes' WHERE key = 'order-recon'")
	require.NoError(t, err)
	want := "sentinel list --state reconciling --older-than 1h -n payments --schema " + e.schema
	for _, args := range [][]string{{"status"}, {"status", "-n", "payments"}} {
		r = e.run(args...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, `reconciling for more than 1h in namespace "payments"`, "%v\n%s", args, r.stdout)
		require.Equal(t, want, findCommand(t, r.stdout, "sentinel list --state reconciling"), "%v", args)
	}
	s := e.run("status", "--exit-code")
	requireCode(t, s, exitAttention)
	require.Equal(t, want, findCommand(t, s.stderr, "sentinel list --state reconciling"))

	p := runPrinted(t, want, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "order-recon")
	require.NotContains(t, p.stdout, "order-fresh")
	p = runPrinted(t, findCommand(t, p.stderr, "sentinel inspect "), "")
	requireCode(t, p, exitOK)
	findCommand(t, p.stdout, "sentinel force-complete order-recon")
}
