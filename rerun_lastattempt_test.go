package sentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The caller of a key's last attempt under WithRerun (fn failed, or
// panicked) got the same error as a caller without the option ("fn
// failed: ..."), which said nothing of the re-runs before it or that none
// is left, and the history's failed events did not say which attempt
// failed: whoever read the log or the history could not tell an attempt
// the next caller re-runs from the last one, which needs an operator. The
// error now says that the attempt was the last WithRerun allows, and each
// failed event under WithRerun carries its attempt and the key's bound.
func TestRerunLastAttemptSaysNoRerunIsLeft(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctx, c, "pay", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorContains(t, err, "as attempt 2 of at most 2")

	_, err = sentinel.Once(ctx, c, "pay", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	t.Log(err)
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.False(t, ee.Rerun)
	require.ErrorContains(t, err, "attempt 2, the last WithRerun allows (2)")
	require.ErrorContains(t, err, "no re-run is left")

	func() {
		defer func() { require.NotNil(t, recover()) }()
		_, _ = sentinel.Once(ctx, c, "boom", func(context.Context) (int, error) { panic("card network client") }, sentinel.WithRerun(1))
	}()

	evs, err := c.History(ctx, "pay")
	require.NoError(t, err)
	var failed []map[string]any
	for _, ev := range evs {
		if ev.Type == "failed" {
			failed = append(failed, ev.Metadata)
		}
	}
	require.Len(t, failed, 2)
	for i, md := range failed {
		require.Equal(t, float64(i+1), md["attempt"], "%v", md)
		require.Equal(t, float64(2), md["max_attempts"], "%v", md)
		require.Equal(t, "provider timed out", md["error"])
	}
	// Without WithRerun (a bound of 1) the event is as it was.
	evs, err = c.History(ctx, "boom")
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Type == "failed" {
			require.NotContains(t, ev.Metadata, "attempt")
		}
	}
}
