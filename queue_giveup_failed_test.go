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
	c, tr, unreachable, failures := unreachableAfterCut(t, e, "queue_draw(")
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

// A waiting ticket given up as its caller's ctx ends whose leave finally
// fails stays in the queue, by nobody, until it expires, holding everyone
// behind it: Turn's error says so (as Client.Turn documents), not only
// that ctx ended.
func TestTurnWaitingTicketWhoseGiveUpFailedSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder, err := e.client(nil).Turn(ctx, "r")
	require.NoError(t, err)
	defer func() { _ = holder.Release(ctx) }()
	c, tr, unreachable, failures := unreachableAfterCut(t, e, "queue_draw(")
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() {
		unreachable.Store(true)
		cancel()
	}
	tr.then.Store(&f)
	_, err = c.Turn(tctx, "r")
	require.Nil(t, tr.then.Load(), "the draw's connection was not cut")
	t.Log(err)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "giving it back failed")
	select {
	case rf := <-failures:
		require.Equal(t, "r", rf.Key)
	case <-time.After(5 * time.Second):
		t.Fatal("the failed give-back was not reported to Observer.ReleaseFailed")
	}
	require.Equal(t, 2, e.count("tickets", "resource = 'r' AND expires_at > pg_catalog.clock_timestamp()"), "held until it expires")
}
