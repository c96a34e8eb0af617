package sentinel_test

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A key whose fn succeeded with a value that could not be encoded is
// completed without its result: every caller gets ErrResult until an
// operator stores the value. Nothing listed such keys among those that
// need an operator (the console's "Needs an operator", AttentionCounts),
// and ExecutionCounts counted them with the completed ones. They are now
// listed (ExecutionFilter.ResultLost, over an index of their own) and
// counted apart (StateCount.ResultLost), until SetResult stores the value.
func TestResultLostListedAndCounted(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(&sentinel.Config{Namespace: "a"})
	b := e.client(&sentinel.Config{Namespace: "b"})
	nan := func(context.Context) (float64, error) { return math.NaN(), nil }
	_, err := sentinel.Once(ctx, a, "lost", nan)
	require.ErrorIs(t, err, sentinel.ErrResult)
	_, err = sentinel.Once(ctx, b, "lost-b", nan)
	require.ErrorIs(t, err, sentinel.ErrResult)
	_, err = sentinel.Once(ctx, a, "fine", func(context.Context) (float64, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, a, "final", func(context.Context) (float64, error) {
		return math.NaN(), sentinel.Final(errors.New("card declined"))
	})
	require.ErrorIs(t, err, sentinel.ErrFinal)
	_, err = sentinel.Once(ctx, a, "stuck", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	keys := func(f sentinel.ExecutionFilter) []string {
		t.Helper()
		rows, _, err := a.Executions(ctx, f)
		require.NoError(t, err)
		var out []string
		for _, r := range rows {
			out = append(out, r.Namespace+"/"+r.Key)
		}
		return out
	}
	require.Equal(t, []string{"a/lost"}, keys(sentinel.ExecutionFilter{ResultLost: true}))
	require.Equal(t, []string{"a/lost"}, keys(sentinel.ExecutionFilter{ResultLost: true, State: sentinel.StateCompleted}))
	require.ElementsMatch(t, []string{"a/lost", "b/lost-b"}, keys(sentinel.ExecutionFilter{ResultLost: true, AllNamespaces: true}))
	for _, bad := range []sentinel.ExecutionFilter{
		{ResultLost: true, Uncertain: true},
		{ResultLost: true, State: sentinel.StateExecuting},
	} {
		_, _, err := a.Executions(ctx, bad)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "%+v", bad)
	}

	counts, err := a.ExecutionCounts(ctx, "", false)
	require.NoError(t, err)
	var lost, completed int64
	for _, s := range counts {
		switch {
		case s.ResultLost:
			require.Equal(t, sentinel.StateCompleted, s.State)
			lost += s.Count
		case s.State == sentinel.StateCompleted:
			completed += s.Count
		}
	}
	require.Equal(t, int64(1), lost)
	require.Equal(t, int64(2), completed, "fine and final")

	att, err := a.AttentionCounts(ctx)
	require.NoError(t, err)
	type row struct {
		ns         string
		state      sentinel.State
		uncertain  bool
		resultLost bool
		n          int64
	}
	var got []row
	for _, s := range att {
		got = append(got, row{s.Namespace, s.State, s.Uncertain, s.ResultLost, s.Count})
	}
	require.Equal(t, []row{
		{"a", sentinel.StateExecuting, true, false, 1},
		{"a", sentinel.StateCompleted, false, true, 1},
		{"b", sentinel.StateCompleted, false, true, 1},
	}, got, "uncertain first, then result lost")
	unc, err := a.UncertainCounts(ctx)
	require.NoError(t, err)
	require.Len(t, unc, 1, "UncertainCounts keeps its uncertain rows")

	ex, err := a.Inspect(ctx, "lost")
	require.NoError(t, err)
	require.NoError(t, a.SetResult(ctx, "lost", 2.5, sentinel.WithToken(ex.Token)))
	require.Empty(t, keys(sentinel.ExecutionFilter{ResultLost: true}), "stored: no longer listed")
}
