package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Execution.Since is when a key entered the state the operator's tools
// show it in: for a key claimed or executing whose lease has ended on the
// database clock (uncertain, rerun pending, handed back by a caller that
// gave up) the lease's end, or UpdatedAt when that is later (a step after
// the lease ended); for every other key UpdatedAt.
func TestExecutionSince(t *testing.T) {
	updated := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	ended := updated.Add(3 * time.Hour)
	for _, tc := range []struct {
		name string
		e    sentinel.Execution
		want time.Time
	}{
		{"uncertain: the lease's end", sentinel.Execution{State: sentinel.StateExecuting, UpdatedAt: updated, LeaseExpiresAt: ended}, ended},
		{"rerun pending: the lease's end", sentinel.Execution{State: sentinel.StateExecuting, UpdatedAt: updated, LeaseExpiresAt: ended, Attempt: 1, MaxAttempts: 3}, ended},
		{"handed back by a caller that gave up: the lease's end", sentinel.Execution{State: sentinel.StateClaimed, UpdatedAt: updated, LeaseExpiresAt: ended}, ended},
		{"handed back after the lease ended: updated_at", sentinel.Execution{State: sentinel.StateClaimed, UpdatedAt: ended, LeaseExpiresAt: updated}, ended},
		{"handed back with no lease: updated_at", sentinel.Execution{State: sentinel.StateClaimed, UpdatedAt: updated}, updated},
		{"running: updated_at", sentinel.Execution{State: sentinel.StateExecuting, UpdatedAt: updated, LeaseExpiresAt: ended, LeaseAlive: true}, updated},
		{"completed: updated_at", sentinel.Execution{State: sentinel.StateCompleted, UpdatedAt: updated, LeaseExpiresAt: ended}, updated},
		{"reconciling: updated_at", sentinel.Execution{State: sentinel.StateReconciling, UpdatedAt: updated, LeaseExpiresAt: ended}, updated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.True(t, tc.want.Equal(tc.e.Since()), "got %v", tc.e.Since())
		})
	}
}

// Read from the database: an uncertain key's Since is its lease's end.
func TestExecutionSinceInspected(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.False(t, ex.LeaseAlive)
	require.False(t, ex.LeaseExpiresAt.Before(ex.UpdatedAt), "%v %v", ex.LeaseExpiresAt, ex.UpdatedAt)
	require.True(t, ex.LeaseExpiresAt.Equal(ex.Since()))
}

// ErrUncertain's Since, to a caller that finds the key uncertain, is the
// key's Execution.Since: when its lease ended, not when the attempt
// started (hours earlier if fn ran that long: renewals do not move
// updated_at).
func TestUncertainErrorSinceIsTheLeaseEnd(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	var updated, leaseEnd time.Time
	require.NoError(t, admin.QueryRow(ctx, "UPDATE "+e.table("executions")+
		` SET updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = 'k' RETURNING updated_at, lease_expires_at`).Scan(&updated, &leaseEnd))
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.True(t, leaseEnd.Equal(ee.Since), "Since %v, the lease's end %v, updated_at %v", ee.Since, leaseEnd, updated)
	err = c.ForceComplete(ctx, "k", 1)
	require.ErrorIs(t, err, sentinel.ErrWrongState, "ForceComplete needs reconciling")
	require.ErrorAs(t, err, &ee)
	require.True(t, leaseEnd.Equal(ee.Since), "Since %v, the lease's end %v", ee.Since, leaseEnd)
}

// StateCount.OldestSince is the earliest Execution.Since of the row's
// keys, as the tools show "since": for uncertain, rerun pending and
// handed-back keys the earliest lease end, while Oldest stays the
// earliest UpdatedAt (an attempt's start). Both ExecutionCounts and
// AttentionCounts give it; for other rows it equals Oldest.
func TestCountsOldestSince(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, "unc", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	var updated, leaseEnd, done time.Time
	require.NoError(t, admin.QueryRow(ctx, "UPDATE "+e.table("executions")+
		` SET updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = 'unc' RETURNING updated_at, lease_expires_at`).Scan(&updated, &leaseEnd))
	require.NoError(t, admin.QueryRow(ctx, "SELECT updated_at FROM "+e.table("executions")+" WHERE key = 'done'").Scan(&done))

	counts, err := c.ExecutionCounts(ctx, "", false)
	require.NoError(t, err)
	require.Len(t, counts, 2)
	require.True(t, counts[0].Uncertain)
	require.True(t, updated.Equal(counts[0].Oldest), "Oldest %v, updated_at %v", counts[0].Oldest, updated)
	require.True(t, leaseEnd.Equal(counts[0].OldestSince), "OldestSince %v, the lease's end %v", counts[0].OldestSince, leaseEnd)
	require.Equal(t, sentinel.StateCompleted, counts[1].State)
	require.True(t, done.Equal(counts[1].Oldest))
	require.True(t, done.Equal(counts[1].OldestSince))

	att, err := c.AttentionCounts(ctx)
	require.NoError(t, err)
	require.Len(t, att, 1)
	require.True(t, updated.Equal(att[0].Oldest))
	require.True(t, leaseEnd.Equal(att[0].OldestSince), "OldestSince %v, the lease's end %v", att[0].OldestSince, leaseEnd)
}

// The caller of an attempt that stopped without an outcome got an
// ErrUncertain whose Since was zero even when the call had read the key's
// row on the way (the completion refused: the refusal is recorded with
// the row's state; under WithRerun, a lost lease: the row is read to see
// whether a re-run took the key over). Since is now filled from that read,
// as Inspect shows it.
func TestUncertainErrorSinceFromTheRowTheCallRead(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	opts := []sentinel.Option{sentinel.WithTTL(time.Second), sentinel.WithHardTTL(1500 * time.Millisecond)}
	// pastExpiry waits, once fn's lease is lost, for the row's lease to
	// end on the database clock too, so that fn's completion is refused.
	pastExpiry := func(key string) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			<-ctx.Done()
			require.Eventually(t, func() bool {
				var ended bool
				err := admin.QueryRow(context.Background(), "SELECT lease_expires_at <= pg_catalog.clock_timestamp() FROM "+
					e.table("executions")+" WHERE key = $1", key).Scan(&ended)
				return err == nil && ended
			}, 20*time.Second, 10*time.Millisecond)
			return 1, nil
		}
	}
	for _, tc := range []struct {
		name string
		key  string
		fn   func(ctx context.Context) (int, error)
		opts []sentinel.Option
	}{
		// fn outlives its hard TTL, on the database clock too, and
		// returns a value: its completion is refused.
		{"completion refused", "refused", pastExpiry("refused"), opts},
		{"completion refused, rerun pending", "refused-rerun", pastExpiry("refused-rerun"),
			append(opts[:len(opts):len(opts)], sentinel.WithRerun(3))},
		// fn returns its ctx's error once the lease is lost.
		{"lease lost, rerun pending", "lost-rerun", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() },
			append(opts[:len(opts):len(opts)], sentinel.WithRerun(3))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sentinel.Once(ctx, c, tc.key, tc.fn, tc.opts...)
			require.ErrorIs(t, err, sentinel.ErrUncertain)
			require.ErrorIs(t, err, sentinel.ErrLeaseLost)
			var ee *sentinel.ExecutionError
			require.ErrorAs(t, err, &ee)
			ex, ierr := c.Inspect(ctx, tc.key)
			require.NoError(t, ierr)
			require.Equal(t, ex.Token, ee.Token)
			require.False(t, ee.Since.IsZero(), "Since is zero: %v", err)
			require.True(t, ex.Since().Equal(ee.Since), "Since %v, Inspect's %v", ee.Since, ex.Since())
			require.True(t, ex.LeaseExpiresAt.Equal(ee.LeaseExpiresAt), "LeaseExpiresAt %v, Inspect's %v", ee.LeaseExpiresAt, ex.LeaseExpiresAt)
		})
	}
}
