package sentinel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A holder frozen past its lease's deadline (SIGSTOP, a paused VM) whose
// row expired meanwhile and was granted to another client resumes and
// renews by hand, its deadline timer not fired yet (or firing while the
// renewal is in flight, which takes the lease out of the heartbeater).
// Heartbeat returned nil, "renewed", though the renewal found the row
// another holder's: the renewal skipped a lease the heartbeater no longer
// held as "being released", and Heartbeat did not check the deadline as
// Err does. A loop that heartbeats before each step took the next step
// while another client held the key.
func TestHeartbeatAfterTheDeadlinePassedReportsTheLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	other := e.client(nil)
	l, err := c.Lease(ctx, "press")
	require.NoError(t, err)
	sentinel.StallLease(l)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("leases")+" SET expires_at = now() - interval '1 ms' WHERE key = 'press'")
	require.NoError(t, err)
	l2, err := other.Lease(ctx, "press")
	require.NoError(t, err, "the row expired: another client takes the key")
	defer l2.Release(ctx)

	err = l.Heartbeat(ctx)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "Heartbeat of a lease past its deadline, the key held by another")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open after Heartbeat")
	}
}
