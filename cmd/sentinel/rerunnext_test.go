package main

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status --exit-code pages on a key rerun pending for too long ("inspect,
// then reconcile"), but inspect of such a key ended with no next step:
// the operator paged at 3 a.m. had to know the reconcile command and
// find its --token. inspect now prints it, runnable as printed, once the
// key's lease ended longer ago than status --exit-code's default
// threshold (15m); a key that stopped a moment ago still gets no command
// (TestRerunShownToOperators): the next caller re-runs it.
func TestInspectRerunPendingPrintsReconcile(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	_, err := sentinel.Once(ctxT(t), pay, "pay-1", func(context.Context) (int, error) {
		return 0, errors.New("provider timed out")
	}, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '20 minutes', updated_at = updated_at - interval '20 minutes' WHERE key = 'pay-1'")
	require.NoError(t, err)

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list --rerun-pending"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "executing (rerun pending, needs an operator: attempt 1 of 3 stopped, no caller with WithRerun came back for more than 15m)")

	r = e.run("inspect", "pay-1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Regexp(t, `next: its lease ended 20m\d+s ago and no caller with WithRerun came back to run attempt 2 of 3; if none will`, r.stdout)
	line := findCommand(t, r.stdout, "sentinel reconcile")
	require.Equal(t, "sentinel reconcile pay-1 -n payments --token 1 --schema "+e.schema, line)
	p = runPrinted(t, line, "y\n")
	requireCode(t, p, exitOK)
	ex, err := pay.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)
	requireCode(t, e.run("status", "--exit-code"), exitOK) // reconciling a moment ago
}
