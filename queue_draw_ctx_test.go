package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A draw still in flight when the caller's ctx ends is let run for
// grantGrace, then cut off. Turn's error wraps ctx's cause, as Client.Turn
// documents ("ctx bounds the wait: ... the error wraps ctx's cause"), so
// a caller's errors.Is(err, context.DeadlineExceeded) holds; it wrapped the
// grace's own cancellation (context.Canceled) instead.
func TestTurnDrawCutOffAfterItsCtxEndedWrapsTheCause(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	first, err := c.Turn(ctx, "printer") // creates the queue's row
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'printer' FOR NO KEY UPDATE")
	require.NoError(t, err)

	cause := errors.New("the caller gave up")
	tctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, cause)
	defer cancel()
	_, err = c.Turn(tctx, "printer")
	t.Log(err)
	require.ErrorIs(t, err, cause, "the error wraps ctx's cause")
	require.NoError(t, tx.Rollback(ctx))
}
