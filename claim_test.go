package sentinel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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

// Migration 15 runs a fresh key's claim in once_claim_packed itself
// instead of through once_claim: the same writes in the same order. A
// fresh Once and a fresh OnceTx leave the same history and row on a
// schema at version 14 (the nested call) as after migration 15, and a
// fresh-path call for a key that exists meanwhile (inserted after the
// claim statement's read) claims nothing and writes nothing.
func TestFreshClaimSameBeforeAndAfterMigration15(t *testing.T) {
	ctx := ctxT(t)
	e := &env{t: t, schema: "behind_" + uuid.NewString()[:8], stmts: &counter{}}
	pool := e.pool(nil)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+e.schema+`" CASCADE`) })
	for _, m := range sentinel.Migrations(e.schema)[:14] {
		_, err := pool.Exec(ctx, m.SQL)
		require.NoError(t, err, m.Name)
	}
	c := e.clientOn(pool, nil)

	type event struct {
		event string
		state sentinel.State
		meta  string
	}
	// run makes a fresh Once and a fresh OnceTx on keys named after key
	// and returns their histories (tokens aside) and rows' states.
	run := func(key string) (events []event, states []sentinel.State) {
		t.Helper()
		meta := sentinel.WithMetadata(map[string]any{"order": "7"})
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 1, nil }, meta)
		require.NoError(t, err)
		_, err = sentinel.OnceTx(ctx, c, key+"-tx", func(context.Context, pgx.Tx) (int, error) { return 2, nil }, meta)
		require.NoError(t, err)
		for _, k := range []string{key, key + "-tx"} {
			h, err := c.History(ctx, k)
			require.NoError(t, err)
			for _, ev := range h {
				require.Equal(t, h[0].Token, ev.Token, "one token per run")
				events = append(events, event{ev.Event, ev.State, fmt.Sprint(ev.Metadata)})
			}
			ex, err := c.Inspect(ctx, k)
			require.NoError(t, err)
			require.Equal(t, 1, ex.Attempt)
			require.False(t, ex.CreatedAt.After(ex.UpdatedAt))
			states = append(states, ex.State)
		}
		return events, states
	}
	evBefore, stBefore := run("a")
	require.NoError(t, c.Migrate(ctx))
	var version int
	require.NoError(t, pool.QueryRow(ctx, `SELECT max(version) FROM "`+e.schema+`".schema_migrations`).Scan(&version))
	require.GreaterOrEqual(t, version, 15)
	evAfter, stAfter := run("b")
	require.Equal(t, evBefore, evAfter)
	require.Equal(t, stBefore, stAfter)
	require.Equal(t, event{"claimed", sentinel.StateClaimed, "map[order:7]"}, evAfter[0])
	require.Equal(t, event{"started", sentinel.StateExecuting, "map[order:7]"}, evAfter[1])

	// The fresh path for a key that exists: nothing claimed, nothing
	// written (the row and its history stay as they are).
	before, err := c.Inspect(ctx, "b")
	require.NoError(t, err)
	hBefore, err := c.History(ctx, "b")
	require.NoError(t, err)
	var claimed bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT "`+e.schema+`".once_claim_packed('default', 'b', 'executing', 'o', 'h', 1,
		3000000, 3000000, NULL, 1, 0, '"`+e.schema+`".fencing_token'::regclass, true) IS NOT NULL`).Scan(&claimed))
	require.False(t, claimed, "the fresh path claimed a key that exists")
	after, err := c.Inspect(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, before.Token, after.Token)
	require.Equal(t, before.State, after.State)
	require.True(t, before.UpdatedAt.Equal(after.UpdatedAt))
	hAfter, err := c.History(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, len(hBefore), len(hAfter))
}
