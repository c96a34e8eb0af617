package main

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// invoice is a result type with integers in every place a schema puts
// them: a member, array items, a pointer.
type invoice struct {
	Total float64 `json:"total"`
	Lines []int64 `json:"lines"`
	Ref   *int    `json:"ref"`
}

// JSON Schema calls 500.0, 5e2 (and any integer, however large) an
// integer; Go's decoder puts none of them in an int. force-complete
// accepted such a value against the declared type, said "callers now get
// the stored result", and every caller got ErrResult instead. It is now
// refused (exit 4, the JSON path, nothing written), and a value the
// callers decode is stored as before.
func TestForceCompleteRefusesIntegersGoCannotDecode(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	require.NoError(t, sentinel.RegisterResultType[receipt](ctxT(t), pay, "pay-"))
	require.NoError(t, sentinel.RegisterResultType[invoice](ctxT(t), pay, "inv-"))
	for _, tc := range []struct{ key, value, path string }{
		{"pay-1", `{"charge_id":"ch_1","amount":500.0}`, "$.amount"},
		{"pay-2", `{"charge_id":"ch_1","amount":5e2}`, "$.amount"},
		{"pay-3", `{"charge_id":"ch_1","amount":99999999999999999999}`, "$.amount"},
		{"inv-1", `{"total":12,"lines":[1,2.0],"ref":3}`, "$.lines[1]"},
		{"inv-2", `{"total":12,"lines":[],"ref":3e0}`, "$.ref"},
	} {
		e.uncertainKey(pay, tc.key)
		requireCode(t, e.run("reconcile", tc.key, "-n", "payments", "--yes"), exitOK)
		out := e.run("force-complete", tc.key, tc.value, "-n", "payments", "--yes")
		requireCode(t, out, exitRefused)
		require.Contains(t, out.stderr, "at "+tc.path+": ", tc.value)
		got, err := pay.Inspect(ctxT(t), tc.key)
		require.NoError(t, err)
		require.Equal(t, sentinel.StateReconciling, got.State, "a refused value was written: %s", tc.value)
	}

	// What Go decodes is stored, and the caller gets it.
	requireCode(t, e.run("force-complete", "pay-1", `{"charge_id":"ch_1","amount":500}`, "-n", "payments", "--yes"), exitOK)
	res, err := sentinel.Once(ctxT(t), pay, "pay-1", func(context.Context) (receipt, error) { return receipt{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, receipt{ChargeID: "ch_1", Amount: 500}, res.Value)
	requireCode(t, e.run("force-complete", "inv-1", `{"total":12.0,"lines":[1,-2],"ref":7}`, "-n", "payments", "--yes"), exitOK)
	inv, err := sentinel.Once(ctxT(t), pay, "inv-1", func(context.Context) (invoice, error) { return invoice{}, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, 12.0, inv.Value.Total)
	require.Equal(t, []int64{1, -2}, inv.Value.Lines)
	require.Equal(t, 7, *inv.Value.Ref)
}
