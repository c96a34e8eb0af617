package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A key whose executor stopped with re-runs left (WithRerun) is not in
// progress: nothing runs it until the next caller with WithRerun, which
// may never come. status counted it as "executing (in progress)" and
// idempotency list showed it so, beside keys a live worker runs; both now
// say the re-run is pending (inspect and list already did).
func TestRerunPendingIsNotInProgress(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), e.client, idempotency.ExecutionKey("cus_1", "k-1"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, rerunPendingLabel)
	require.NotContains(t, r.stdout, "in progress", r.stdout)
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	var st struct {
		Counts []map[string]any `json:"counts"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Counts, 1, r.stdout)
	require.Equal(t, true, st.Counts[0]["rerun_pending"], r.stdout)
	require.Equal(t, float64(2), st.Counts[0]["count"], r.stdout)

	r = e.run("idempotency", "list")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "rerun pending")
	require.NotContains(t, r.stdout, "in progress", r.stdout)
}
