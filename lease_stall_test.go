package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A holder frozen past its local deadline (SIGSTOP, a paused VM) resumes
// with its deadline timer not fired yet: Lease.Err returned nil, although
// the lease could no longer be trusted (its row may have expired and
// another client hold the key), so a worker that checks Err before each
// step did one more step unguarded. Turn.Err had this fixed; Lease.Err
// did not.
func TestLeaseErrAfterItsDeadlinePassedIsALoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	other := e.client(nil)
	l, err := c.Lease(ctx, "press")
	require.NoError(t, err)
	sentinel.StallLease(l)
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost, "Err of a lease past its deadline")
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open after Err reported the loss")
	}
	// The release still frees the row (nobody else held it meanwhile), so
	// the key is not kept for the rest of its TTL; it reports the loss.
	require.ErrorIs(t, l.Release(ctx), sentinel.ErrLeaseLost)
	l2, err := other.Lease(ctx, "press")
	require.NoError(t, err, "the key was not freed by the release after the loss")
	require.NoError(t, l2.Release(ctx))
}

// Do's fn that returns after the lease's local deadline passed (the
// process was frozen while fn ran) reports the loss, though the deadline
// timer has not fired yet: the work may have overlapped another holder.
func TestDoReportsALeaseFrozenPastItsDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	err := c.Do(ctx, "press", func(ctx context.Context, l *sentinel.Lease) error {
		sentinel.StallLease(l)
		return nil
	})
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
}
