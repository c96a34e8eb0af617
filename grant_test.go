package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A grant (a queue ticket, a lease, a Once claim) committed as the caller's
// ctx ends must be given back, not left held, unknown to anyone, for a TTL.

// A Turn whose ctx ends while its draw statement runs leaves nothing in the
// queue: a ticket drawn as ctx ended is given back (cancelled) before Turn
// returns, instead of holding everyone behind it for a TTL.
func TestTurnCancelledDuringDrawLeavesNoTicket(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	holder, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	defer func() { require.NoError(t, holder.Release(ctx)) }()
	for i := range 60 {
		// Deadlines around a draw's round trip, so some end mid-statement.
		d := time.Duration(i%12) * 250 * time.Microsecond
		cctx, cancel := context.WithTimeout(ctx, d)
		_, err := c.Turn(cctx, "printer")
		cancel()
		require.Error(t, err)
		q, err := c.Queue(ctx, "printer")
		require.NoError(t, err)
		require.Empty(t, q.Waiting, "iteration %d (deadline %v): a ticket was left behind", i, d)
	}
	// A draw that serves its ticket (nobody ahead) as ctx ends gives the
	// turn back.
	for i := range 60 {
		d := time.Duration(i%12) * 250 * time.Microsecond
		cctx, cancel := context.WithTimeout(ctx, d)
		tn, err := c.Turn(cctx, "scanner")
		cancel()
		if d == 0 {
			require.ErrorIs(t, err, context.DeadlineExceeded, "a Turn whose ctx had ended before it was called")
		}
		if err == nil {
			require.NoError(t, tn.Release(ctx))
			continue
		}
		q, err := c.Queue(ctx, "scanner")
		require.NoError(t, err)
		require.Nil(t, q.Holder, "iteration %d (deadline %v): a turn was left held", i, d)
	}
	// And a lease granted as its ctx ends is not left held.
	for i := range 60 {
		d := time.Duration(i%12) * 250 * time.Microsecond
		cctx, cancel := context.WithTimeout(ctx, d)
		l, err := c.Lease(cctx, "job")
		cancel()
		if err == nil {
			require.NoError(t, l.Release(ctx))
			continue
		}
		_, err = c.Holder(ctx, "job")
		require.ErrorIs(t, err, sentinel.ErrNotFound, "iteration %d (deadline %v): a lease was left held", i, d)
	}
}

// Once: a key claimed as the caller's ctx ends is given back at once, not
// left in progress for a TTL.
func TestOnceCancelledDuringClaimGivesTheKeyBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	other := e.client(nil)
	gaveBack := 0
	for i := range 80 {
		key := fmt.Sprintf("k-%d", i)
		d := time.Duration(i%16) * 200 * time.Microsecond
		cctx, cancel := context.WithTimeout(ctx, d)
		_, err := sentinel.Once(cctx, c, key, func(context.Context) (int, error) { return 1, nil })
		cancel()
		if err == nil {
			continue // ran in time
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("iteration %d: %v", i, err) // ended later than the claim: not this test's case
			continue
		}
		res, err := sentinel.Once(ctx, other, key, func(context.Context) (int, error) { return 2, nil })
		require.NoError(t, err, "iteration %d (deadline %v): the key was left in progress", i, d)
		require.Equal(t, 2, res.Value)
		if ex, err := other.Inspect(ctx, key); err == nil && ex.Token > 1 {
			gaveBack++
		}
	}
	t.Logf("keys whose first claim was given back: %d", gaveBack)
}
