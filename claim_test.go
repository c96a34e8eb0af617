package sentinel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A claim returns the row it claimed packed (once_claim_packed, and the
// claim set's own packing), not read back: what Once builds from it must
// be the row as stored, field by field, through the single statement and
// through a set statement, for a fresh key, a takeover and a re-run.
func TestClaimReturnsTheRowItClaimed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	const owner, host, pid = "claimer", "claim-host", 4242
	claim := func(ctx context.Context, key string) (*sentinel.Execution, bool, error) {
		row := sentinel.CoQueryRow(ctx, c, sentinel.CoClaim, sentinel.ClaimSQL(c), "default", key, "executing", owner, host, pid,
			int64(3_000_000), int64(600_000_000), nil, 5, int64(0))
		return sentinel.ScanClaim(row, "default", key, sentinel.StateExecuting, owner, host, pid)
	}
	check := func(key string, got *sentinel.Execution, claimed bool, err error, attempt int) {
		t.Helper()
		require.NoError(t, err, key)
		require.True(t, claimed, key)
		want, err := c.Inspect(ctx, key)
		require.NoError(t, err, key)
		require.Equal(t, want.Namespace, got.Namespace, key)
		require.Equal(t, want.Key, got.Key, key)
		require.Equal(t, want.State, got.State, key)
		require.Equal(t, want.Owner, got.Owner, key)
		require.Equal(t, want.Host, got.Host, key)
		require.Equal(t, want.PID, got.PID, key)
		require.Equal(t, want.Token, got.Token, key)
		require.True(t, want.CreatedAt.Equal(got.CreatedAt), "%s: created %v, stored %v", key, got.CreatedAt, want.CreatedAt)
		require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "%s: updated %v, stored %v", key, got.UpdatedAt, want.UpdatedAt)
		require.True(t, want.LeaseExpiresAt.Equal(got.LeaseExpiresAt), "%s: lease %v, stored %v", key, got.LeaseExpiresAt, want.LeaseExpiresAt)
		require.True(t, want.HardExpiresAt.Equal(got.HardExpiresAt), "%s: hard %v, stored %v", key, got.HardExpiresAt, want.HardExpiresAt)
		require.True(t, got.CompletedAt.IsZero(), key)
		require.Nil(t, got.Result, key)
		require.True(t, got.LeaseAlive, key)
		require.Equal(t, attempt, got.Attempt, key)
		require.Equal(t, 5, got.MaxAttempts, key)
		// The lease's time left, counted from the statement's start: the
		// TTL plus the time the statement took to reach the claim.
		require.True(t, sentinel.RemainingForTest(got) >= 3*time.Second && sentinel.RemainingForTest(got) < 4*time.Second,
			"%s: %v left", key, sentinel.RemainingForTest(got))
		require.True(t, got.HardExpiresAt.Sub(got.LeaseExpiresAt) > 590*time.Second, key)
	}

	// The single statement: a fresh key, then a takeover of a claimed
	// key whose lease expired (attempt 1 again), then a re-run of an
	// executing one whose lease expired (attempt 2).
	ex, claimed, err := claim(ctx, "single")
	check("single", ex, claimed, err, 1)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("executions")+" SET state = 'claimed', lease_expires_at = now() - interval '1 second' WHERE key = 'single'")
	require.NoError(t, err)
	ex, claimed, err = claim(ctx, "single")
	check("single", ex, claimed, err, 1)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("executions")+" SET lease_expires_at = now() - interval '1 second' WHERE key = 'single'")
	require.NoError(t, err)
	ex, claimed, err = claim(ctx, "single")
	check("single", ex, claimed, err, 2)

	// Not claimed (the key is held): the key's row as read.
	ex, claimed, err = claim(ctx, "single")
	require.NoError(t, err)
	require.False(t, claimed)
	stored, err := c.Inspect(ctx, "single")
	require.NoError(t, err)
	require.Equal(t, stored.Token, ex.Token)
	require.Equal(t, owner, ex.Owner)
	require.Equal(t, sentinel.StateExecuting, ex.State)
	require.True(t, ex.LeaseAlive)

	// The set statement: claims queued behind a held lane go out together.
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	sets := sentinel.CoSets(c)
	type result struct {
		ex      *sentinel.Execution
		claimed bool
		err     error
	}
	results := make([]result, 3)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			ex, claimed, err := claim(ctx, fmt.Sprintf("set-%d", i))
			results[i] = result{ex, claimed, err}
		})
	}
	waitQueued(t, queued, sentinel.CoClaim, len(results))
	release()
	wg.Wait()
	require.Greater(t, sentinel.CoSets(c), sets, "the queued claims went out as a set statement")
	for i, r := range results {
		check(fmt.Sprintf("set-%d", i), r.ex, r.claimed, r.err, 1)
	}
}

// A client on a schema migrated before once_claim_packed (migration 13)
// reports ErrNotMigrated from Once, saying what to do, and runs fn once
// the schema is migrated.
func TestOnceOnASchemaBehindTheCodeReportsNotMigrated(t *testing.T) {
	c := clientOnSchemaAt(t, 12)
	ctx := ctxT(t)
	ran := 0
	fn := func(context.Context) (int, error) { ran++; return 7, nil }
	_, err := sentinel.Once(ctx, c, "k", fn)
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
	require.Contains(t, err.Error(), "Migrate")
	require.Zero(t, ran)

	require.NoError(t, c.Migrate(ctx))
	res, err := sentinel.Once(ctx, c, "k", fn)
	require.NoError(t, err)
	require.Equal(t, 7, res.Value)
	require.Equal(t, 1, ran)
}
