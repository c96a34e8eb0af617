package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Issue 17.10: Turn.Release twice returned "sentinel: lease released",
// although its godoc says it is idempotent and Lease.Release twice
// returns nil.
func TestTurnReleaseTwiceIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
	require.NoError(t, tn.Release(ctx), "a second Release of a released turn")
	set, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, set.Release(ctx))
	require.NoError(t, set.Release(ctx), "a second Release of a released turn set")
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx), "Lease.Release, for comparison")
}

// Turn.Release after Close returned an error matching ErrLeaseLost ("lost:
// client closed"), which its godoc reserves for a turn whose ticket expired
// (someone behind may have been served), although Close had given the live
// ticket back; Lease.Release after Close returns nil.
func TestTurnReleaseAfterCloseIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	set, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	c.Close()
	require.Zero(t, e.count("tickets", ""), "Close gives the tickets back")
	require.NoError(t, tn.Release(ctx), "Turn.Release after Close")
	require.NoError(t, set.Release(ctx), "TurnSet.Release after Close")
	require.NoError(t, l.Release(ctx), "Lease.Release after Close, for comparison")
}

// Ticket.ServedAt and QueueStatus.Holder said a served ticket's ServedAt
// stays zero "until its client confirms": the leave ahead of a ticket
// serves it in its own statement, and Queue shows it served while its
// client has not heard yet (here: it does not listen, and re-checks only
// at the expiry of the ticket ahead, 30s later).
func TestQueueShowsATicketServedByTheLeaveAheadBeforeItsClientHears(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	b := e.client(&sentinel.Config{DisableListen: true, WaitRecheck: time.Minute})
	held, err := a.Turn(ctx, "printer")
	require.NoError(t, err)
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		if tn, err := b.Turn(bctx, "printer", sentinel.WithLabel("b")); err == nil {
			_ = tn.Release(ctx)
		}
	}()
	waitWaiting(t, a, "printer", 1)
	require.NoError(t, held.Release(ctx))
	q, err := a.Queue(ctx, "printer")
	require.NoError(t, err)
	require.NotNil(t, q.Holder)
	require.Equal(t, "b", q.Holder.Label)
	select {
	case <-returned:
		t.Fatal("b's Turn returned already: the check proves nothing")
	default:
	}
	require.False(t, q.Holder.ServedAt.IsZero(), "served by the leave ahead, before b's client heard")
	cancel()
	<-returned
}
