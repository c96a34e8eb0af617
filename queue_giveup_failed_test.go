package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A ticket served as its caller's ctx ends whose give-back finally fails
// is reported to Observer.ReleaseFailed with what its Err returns: an
// error matching ErrLeaseLost whose cause is the failed statement's error
// (ReleaseFailure.Err), as for a lease or a ticket drawn as the client
// closes. It carried the ctx's cause instead, which says nothing of why
// the ticket stayed in the queue.
func TestTurnGivenUpAsCtxEndsReportsTheFailedLeave(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, tr, unreachable, failures := unreachableAfterCut(t, e, "queue_ahead(")
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() {
		unreachable.Store(true)
		cancel()
	}
	tr.then.Store(&f)
	_, err := c.Turn(tctx, "r")
	require.Nil(t, tr.then.Load(), "the draw's connection was not cut")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "giving it back failed")
	select {
	case rf := <-failures:
		require.Equal(t, "r", rf.Key)
		require.Equal(t, sentinel.LossTicket, rf.Kind)
		require.ErrorIs(t, rf.Err, sentinel.ErrLeaseLost)
		require.ErrorContains(t, rf.Err, "leave queue", "the cause is the failed leave, not the ctx's end")
	case <-time.After(5 * time.Second):
		t.Fatal("the failed give-back was not reported to Observer.ReleaseFailed")
	}
}
