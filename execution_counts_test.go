package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestExecutionCounts(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(&sentinel.Config{Namespace: "a"})
	b := e.client(&sentinel.Config{Namespace: "b"})
	for _, k := range []string{"1", "2"} {
		_, err := sentinel.Once(ctx, a, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	_, err := sentinel.Once(ctx, a, "stuck", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, b, "x", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, a, "running", func(context.Context) (int, error) {
			close(started)
			<-finish
			return 1, nil
		}, sentinel.WithTTL(5*time.Second))
		done <- err
	}()
	<-started
	defer func() { close(finish); require.NoError(t, <-done) }()

	_, err = a.ExecutionCounts(ctx, "a", true)
	require.ErrorIs(t, err, sentinel.ErrInvalid)

	counts, err := a.ExecutionCounts(ctx, "", false)
	require.NoError(t, err)
	type row struct {
		ns        string
		state     sentinel.State
		uncertain bool
		n         int64
	}
	var got []row
	for _, c := range counts {
		got = append(got, row{c.Namespace, c.State, c.Uncertain, c.Count})
		require.False(t, c.Oldest.IsZero())
	}
	require.Equal(t, []row{
		{"a", sentinel.StateExecuting, true, 1}, // uncertain first
		{"a", sentinel.StateCompleted, false, 2},
		{"a", sentinel.StateExecuting, false, 1},
	}, got)

	counts, err = a.ExecutionCounts(ctx, "", true)
	require.NoError(t, err)
	require.Len(t, counts, 4)
	require.True(t, counts[0].Uncertain)
	require.Equal(t, "b", counts[3].Namespace)
}
