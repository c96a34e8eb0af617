package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A key that stopped under WithRerun with attempts left is not an
// operator's case: list --uncertain leaves it out, list and inspect show
// the pending re-run; once its attempts are used up it is UNCERTAIN, and
// history shows the re-run with its attempt and previous token.
func TestRerunShownToOperators(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("list", "--uncertain")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "pay-1")
	r = e.run("list")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "executing (rerun pending: attempt 1 of 2 stopped, the next caller with WithRerun runs attempt 2)")
	r = e.run("inspect", "pay-1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "executing (rerun pending: attempt 1 of 2 stopped, the next caller with WithRerun runs attempt 2)")
	require.Contains(t, r.stdout, "1 of at most 2 (WithRerun)")
	require.NotContains(t, r.stdout, "sentinel reconcile")

	// The re-run fails too: no attempt left.
	_, err = sentinel.Once(ctxT(t), e.client, "pay-1", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	r = e.run("list", "--uncertain")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "pay-1")
	require.Contains(t, r.stdout, "UNCERTAIN")
	r = e.run("inspect", "pay-1", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.True(t, ex.Uncertain)
	require.False(t, ex.Rerunnable)
	require.Equal(t, 2, ex.Attempt)
	require.Equal(t, 2, ex.MaxAttempts)
	r = e.run("history", "pay-1", "--json")
	requireCode(t, r, exitOK)
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs))
	var types []string
	var first int64
	for _, ev := range evs {
		types = append(types, ev.Type)
		if ev.Type == "claimed" && first == 0 {
			first = ev.Token
		}
		if ev.Type == "rerun" {
			require.Equal(t, float64(2), ev.Metadata["attempt"])
			require.Equal(t, float64(first), ev.Metadata["previous_token"])
		}
	}
	require.Equal(t, []string{"claimed", "started", "failed", "rerun", "claimed", "started", "failed"}, types)
}
