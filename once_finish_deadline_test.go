package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Once's completion stops the execution lease's renewals, then sends its
// statement. When the lease's local deadline passed while that statement
// was in flight (here it waits for a row lock), the deadline timer
// reported the end at once as a loss (Observer.LeaseLost, and a warning
// "lease ended"), although the statement then found the lease still live
// on the database clock and committed: the caller got fn's result, and
// the Observer had counted a loss nothing else reports. The loss is now
// reported only once the completion's outcome is known: none when it
// committed; once when it was refused (here the row expired first).
func TestOnceCompletionAcrossTheDeadlineIsNoLossToTheObserver(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var losses atomic.Int32
	var logs lockedBuffer
	c := e.client(&sentinel.Config{DefaultTTL: 3 * time.Second, SafetyMargin: 900 * time.Millisecond, ReleaseTimeout: 20 * time.Second,
		Observer: &sentinel.Observer{LeaseLost: func(sentinel.LeaseLoss) { losses.Add(1) }},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
	for _, commit := range []bool{true, false} {
		losses.Store(0)
		mark := len(logs.String())
		key := "slow-completion"
		if !commit {
			key = "refused-completion"
		}
		var tx pgx.Tx
		fnCtxs := make(chan context.Context, 1)
		type outcome struct {
			res sentinel.Result[int]
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			res, err := sentinel.Once(ctx, c, key, func(fctx context.Context) (int, error) {
				// Lock the key's row as fn returns: the completion waits.
				var err error
				if tx, err = admin.Begin(ctx); err != nil {
					return 0, err
				}
				if _, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = $1 FOR SHARE", key); err != nil {
					return 0, err
				}
				fnCtxs <- fctx
				return 7, nil
			})
			done <- outcome{res, err}
		}()
		var fnCtx context.Context
		select {
		case fnCtx = <-fnCtxs:
		case o := <-done:
			t.Fatalf("Once returned before its completion waited: %v", o.err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		select {
		case <-fnCtx.Done(): // the deadline passed while the completion waits
		case <-time.After(10 * time.Second):
			t.Fatal("the deadline did not end the execution's lease")
		}
		require.ErrorIs(t, context.Cause(fnCtx), sentinel.ErrLeaseLost, "ended by its deadline")
		if !commit {
			// The row expires (on the database clock) before the waiting
			// completion gets it: the completion is then refused.
			_, err := tx.Exec(ctx, "UPDATE "+e.table("executions")+" SET lease_expires_at = clock_timestamp() WHERE key = $1", key)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(ctx))
		o := <-done
		if commit {
			require.NoError(t, o.err, "the completion committed (3s TTL, deadline at 2.1s)")
			require.Equal(t, 7, o.res.Value)
			require.Zero(t, losses.Load(), "the Observer was told of a loss although the completion committed")
			require.NotContains(t, logs.String()[mark:], "lease ended")
			continue
		}
		require.ErrorIs(t, o.err, sentinel.ErrUncertain, "the completion was refused")
		var lost *sentinel.LostError
		require.True(t, errors.As(o.err, &lost) || errors.Is(o.err, sentinel.ErrLeaseLost), "the refusal says the lease was lost: %v", o.err)
		require.Equal(t, int32(1), losses.Load(), "the loss is reported once")
		require.Contains(t, logs.String()[mark:], "lease ended")
	}
}
