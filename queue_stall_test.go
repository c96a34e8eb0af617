package sentinel_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A holder frozen past its local deadline (SIGSTOP, a paused VM) resumes
// with its deadline timer not fired yet: Turn.Err returned nil, although
// the turn could no longer be trusted (someone behind may hold it), so a
// program that checks Err before each step did one more step unguarded.
func TestTurnErrAfterItsDeadlinePassedIsALoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	tn, err := c.Turn(ctx, "press")
	require.NoError(t, err)
	require.True(t, sentinel.StallTicket(c, "default", "press", tn.Ticket()))
	require.ErrorIs(t, tn.Err(), sentinel.ErrLeaseLost, "Err of a turn past its deadline")
	select {
	case <-tn.Done():
	default:
		t.Fatal("Done still open after Err reported the loss")
	}
	require.ErrorIs(t, tn.Release(ctx), sentinel.ErrLeaseLost)
}

// A waiter frozen past its local deadline, granted by the leave ahead
// while frozen, resumes with the grant's wake-up ('s') and its deadline
// timer not fired yet: Turn returned that ticket as the caller's turn,
// although its local deadline had passed (its row may have expired and
// the ticket behind been served). It must give the ticket up and queue
// again instead.
func TestTurnGrantedPastItsDeadlineIsNotReturned(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	h, err := holder.Turn(ctx, "press")
	require.NoError(t, err)

	var stalled atomic.Int64
	sentinel.SetAfterDraw(func(ticket int64) {
		if stalled.CompareAndSwap(0, ticket) {
			require.True(t, sentinel.StallTicket(c, "default", "press", ticket))
		}
	})
	t.Cleanup(func() { sentinel.SetAfterDraw(nil) })
	got := make(chan *sentinel.Turn, 1)
	errs := make(chan error, 1)
	go func() {
		tn, err := c.Turn(ctx, "press", sentinel.WithLabel("frozen"))
		if err != nil {
			errs <- err
			return
		}
		got <- tn
	}()
	waitWaiting(t, holder, "press", 1)
	require.NoError(t, h.Release(ctx))
	select {
	case err := <-errs:
		t.Fatal(err)
	case tn := <-got:
		require.NotEqual(t, stalled.Load(), tn.Ticket(), "Turn returned the ticket whose deadline had passed")
		require.NoError(t, tn.Err())
		require.True(t, time.Now().Before(tn.Deadline()))
		require.NoError(t, tn.Release(ctx))
	case <-time.After(30 * time.Second):
		t.Fatal("Turn did not return")
	}
}

// A turn TurnAll had taken was lost while it waited for the next resource
// (its ticket removed, its renewals refused): TurnAll returned the set all
// the same, one of its turns already over, and a caller that did not look
// at Done first worked on a resource it did not hold.
func TestTurnAllWithATurnLostWhileWaitingReturnsTheLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	other := e.client(&sentinel.Config{DefaultTTL: time.Second})
	c := e.client(&sentinel.Config{DefaultTTL: time.Second})
	b, err := other.Turn(ctx, "b")
	require.NoError(t, err)
	type result struct {
		set *sentinel.TurnSet
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := c.TurnAll(ctx, []string{"b", "a"}, sentinel.WithLabel("both"))
		got <- result{s, err}
	}()
	waitWaiting(t, other, "b", 1)
	// The ticket on a goes (as an operator deleting it, or its expiry
	// while the database was out of reach would): its next renewal fails.
	_, err = admin.Exec(ctx, "DELETE FROM "+pgx.Identifier{e.schema}.Sanitize()+".tickets WHERE resource = 'a'")
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond) // more than a TTL: the loss is known
	require.NoError(t, b.Release(ctx))
	var r result
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("TurnAll did not return")
	}
	if r.err == nil {
		t.Fatalf("TurnAll returned a set whose turn is over: %v", r.set.Err())
	}
	require.ErrorIs(t, r.err, sentinel.ErrLeaseLost)
	// Nothing is held: b was given back.
	q, err := other.Queue(ctx, "b")
	require.NoError(t, err)
	require.Nil(t, q.Holder)
}

// A Release that read its turn not left yet, then lost the race for the
// leave to Client.Close's give-back, ran a leave that sent nothing and
// found nothing: Release then reported the turn lost ("expired before
// release") though Close had given the live ticket back and nobody
// behind could have been served. A later leave now returns what the
// first found.
func TestALeaveAfterTheGiveBackSeesItLive(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "press")
	require.NoError(t, err)
	live, err := sentinel.GiveBack(ctx, tn) // Close's give-back, first
	require.NoError(t, err)
	require.True(t, live)
	live, err = sentinel.GiveBack(ctx, tn) // the Release that lost the race
	require.NoError(t, err)
	require.True(t, live, "the second leave must see the live give-back")
}

// TurnSet.Context of a set that has ended (one of its turns released or
// lost), or whose turn's deadline has passed (a frozen process that just
// resumed, its timer not fired yet), returned a ctx that was not
// cancelled: a goroutine cancelled it some time later (or, past a
// deadline, only when the timer fired). A loop that derives its work's
// ctx from the set and checks it before each step took one step on turns
// it no longer held. As Lease.Context and Turn.Context, it is now
// cancelled before Context returns, its cause the set's Err.
func TestTurnSetContextOfAnEndedSetIsCancelledAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	for i := range 20 {
		s, err := c.TurnAll(ctx, []string{"a", "b"})
		require.NoError(t, err)
		require.NoError(t, s.Turns()[i%2].Release(ctx))
		work, cancel := s.Context(ctx)
		require.Error(t, work.Err(), "the ctx of a set with a released turn (try %d)", i)
		require.ErrorIs(t, context.Cause(work), sentinel.ErrReleased)
		cancel()
		require.NoError(t, s.Release(ctx))
	}

	s, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.True(t, sentinel.StallTicket(c, "default", "b", s.Turns()[1].Ticket()))
	work, cancel := s.Context(ctx)
	defer cancel()
	require.Error(t, work.Err(), "the ctx of a set whose turn is past its deadline")
	require.ErrorIs(t, context.Cause(work), sentinel.ErrLeaseLost)
	_ = s.Release(ctx)
}
