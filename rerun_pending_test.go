package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An attempt under WithRerun that stops without an outcome while attempts
// remain (fn's error here; a panic or a lost lease alike) leaves the key to
// the next caller with WithRerun: its caller's error still matches
// ErrUncertain, but says Rerun, the Observer counts rerun_pending (not the
// uncertain outcome operators are told to alert on) and the log is Info,
// not the Warn that asks a person to reconcile it. The last attempt, and a
// key without WithRerun, stay uncertain. A caller without WithRerun that
// finds the key waiting for its re-run is told Rerun too.
func TestRerunPendingIsNoPage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var outcomes []sentinel.OnceOutcome
	var logs lockedBuffer
	c := e.client(&sentinel.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Observer: &sentinel.Observer{OnceEnd: func(_ context.Context, ev sentinel.OnceEvent) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, ev.Outcome)
		}},
	})
	last := func() sentinel.OnceOutcome {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[len(outcomes)-1]
	}
	fails := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	rerunOf := func(err error) bool {
		var ee *sentinel.ExecutionError
		require.ErrorAs(t, err, &ee)
		return ee.Rerun
	}

	_, err := sentinel.Once(ctx, c, "pay", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.True(t, rerunOf(err), "attempt 1 of 2: %v", err)
	require.Equal(t, sentinel.OutcomeRerunPending, last())
	require.Contains(t, logs.String(), "the next Once call with WithRerun runs it again")
	require.NotContains(t, logs.String(), "reconcile it")
	uncertain, _, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true})
	require.NoError(t, err)
	require.Empty(t, uncertain, "the operator's list agrees")

	_, err = sentinel.Once(ctx, c, "pay", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrUncertain, "a caller without WithRerun does not run it")
	require.True(t, rerunOf(err), "but is told a caller with WithRerun will: %v", err)
	require.Equal(t, sentinel.OutcomeRerunPending, last())

	_, err = sentinel.Once(ctx, c, "pay", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, rerunOf(err), "the last attempt: %v", err)
	require.Equal(t, sentinel.OutcomeUncertain, last())
	require.Contains(t, logs.String(), "execution outcome uncertain; reconcile it")

	_, err = sentinel.Once(ctx, c, "plain", fails)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, rerunOf(err))
	require.Equal(t, sentinel.OutcomeUncertain, last())
	_, err = sentinel.Once(ctx, c, "plain", fails)
	require.False(t, rerunOf(err))
	require.Equal(t, sentinel.OutcomeUncertain, last())
}
