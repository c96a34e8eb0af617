package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// lockLeaderRow locks group's leadership row in a transaction of the test
// (FOR NO KEY UPDATE: the lock a registration as waiting, a resignation or
// a renewal in flight holds), rolled back in cleanup, and returns it with
// its backend's pid.
func lockLeaderRow(t *testing.T, e *env, group string) (pgx.Tx, int32) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leaders")+" WHERE election = $1 FOR NO KEY UPDATE", group)
	require.NoError(t, err)
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid))
	return tx, pid
}

// blockedBy says whether some backend waits for a lock that backend holder
// holds.
func blockedBy(t *testing.T, holder int32) bool {
	var n int
	require.NoError(t, admin.QueryRow(ctxT(t),
		"SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&n))
	return n > 0
}

// Issue 30: a follower woken by a resignation campaigned while the
// group's expired row was still locked by a transaction that was
// committing (the resigner's registration as waiting on its released row,
// the resignation itself): the campaign skipped the row (SKIP LOCKED),
// read the leader as "expired, locked", and backed off 10 ms, then 20, 40:
// nothing marks the lock's end. That was the handover's tail (p90 about
// 35 ms against a p50 of 7 ms). A campaign that finds the expired row
// locked now waits for the lock inside the server (bounded) and takes the
// term as soon as the holder commits, without a backoff sleep.
func TestElectorCampaignWaitsForTheLockOfAnExpiredRow(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	a, _ := leading(t, ca, "lockwait")
	require.NoError(t, a.Resign(ctx)) // nobody registered: the row is expired, a held off

	tx, holder := lockLeaderRow(t, e, "lockwait")
	b, err := cb.Elector("lockwait", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	// b's campaign meets the locked row: it either waits for the lock in
	// the server or (before) skipped the row and backed off.
	waitFor(t, 10*time.Second, "b's campaign to meet the locked row", func() bool {
		return blockedBy(t, holder) || sentinel.ElectorLockedBackoffs(b) > 0
	})
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "b to lead", b.IsLeader)
	require.Zero(t, sentinel.ElectorLockedBackoffs(b), "b backed off from the locked row instead of waiting for its lock")
	require.False(t, a.IsLeader())
}

// The wait for a locked expired row is bounded inside the server: a row
// held for long (an open transaction guarded by the old term, say) does
// not keep the campaign's connection waiting; the follower falls back to
// its backoff, re-campaigns, and takes the term once the row is free.
func TestElectorCampaignLockWaitIsBounded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	a, _ := leading(t, ca, "lockwait-bound")
	require.NoError(t, a.Resign(ctx))

	tx, holder := lockLeaderRow(t, e, "lockwait-bound")
	b, err := cb.Elector("lockwait-bound", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b's campaign to wait for the locked row", func() bool { return blockedBy(t, holder) })
	// The wait times out in the server (a few hundred ms): b backs off
	// and campaigns again, while the row stays locked.
	waitFor(t, 10*time.Second, "b to give up waiting and back off", func() bool { return sentinel.ElectorLockedBackoffs(b) >= 2 })
	require.False(t, b.IsLeader())
	// No connection of b's was left in a failed transaction by the
	// timed-out waits.
	var aborted int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE state = 'idle in transaction (aborted)'").Scan(&aborted))
	require.Zero(t, aborted)
	require.LessOrEqual(t, cb.Pool().Stat().TotalConns(), int32(3), "b's waits held more connections than its campaign")
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "b to lead once the row is free", b.IsLeader)
}

// A follower's registration as waiting (sqlElectionWait) that found the
// group's row locked (a renewal, another follower's registration, a
// resignation committing) registered nothing and backed off, 10 ms
// doubling up to WaitRecheck, with nothing to mark the lock's end. A
// resignation made meanwhile saw no registration and sent no wake-up, so
// the follower slept out the rest of its backoff before it campaigned.
// The registration now waits for the lock inside the server (bounded, as
// a campaign does) and registers as soon as the holder commits: the
// resignation that follows wakes it (or hands it the term).
func TestElectorRegistrationWaitsForTheRowLock(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca := e.client(&sentinel.Config{DefaultTTL: ttl})
	cb := e.client(&sentinel.Config{DefaultTTL: ttl, WaitRecheck: 5 * time.Second})
	a, _ := leading(t, ca, "regwait")

	// The row is locked as b, a new follower, registers: nobody else is
	// registered, so only b's own registration makes a resignation wake it.
	tx, holder := lockLeaderRow(t, e, "regwait")
	b, err := cb.Elector("regwait", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b's registration to meet the locked row", func() bool {
		return blockedBy(t, holder) || sentinel.ElectorWaitBackoffs(b) > 0
	})
	time.Sleep(100 * time.Millisecond) // a lock held that long: b's backoff doubled (before)
	require.NoError(t, tx.Rollback(ctx))
	// Resign once b registered (before: once its registration backed off
	// again, so that it sleeps).
	waitFor(t, 10*time.Second, "b to register or back off", func() bool {
		return e.count("leaders", "election = 'regwait' AND waiting_until > pg_catalog.clock_timestamp()") == 1 ||
			sentinel.ElectorWaitBackoffs(b) >= 4
	})
	backoffs := sentinel.ElectorWaitBackoffs(b)
	begin := time.Now()
	require.NoError(t, a.Resign(ctx))
	waitFor(t, 10*time.Second, "b to lead", b.IsLeader)
	t.Logf("b backed off %d times; it led %v after the resignation", backoffs, time.Since(begin))
	require.Zero(t, backoffs, "b backed off from the locked row instead of waiting for its lock")
}

// The registration's wait for the row is bounded inside the server, as the
// campaign's is: a row held for long does not keep the follower's
// connection waiting; it backs off, re-checks, and registers once the row
// is free. Its lock_timeout stays in the wait's transaction (one pool
// connection: the session's setting is unchanged).
func TestElectorRegistrationLockWaitIsBounded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second // the wait: 300 ms at most
	ca := e.client(&sentinel.Config{DefaultTTL: ttl})
	pb := e.pool(func(c *pgxpool.Config) { c.MaxConns = 1 })
	cb := e.clientOn(pb, &sentinel.Config{DefaultTTL: ttl})
	a, _ := leading(t, ca, "regwait-bound")

	tx, holder := lockLeaderRow(t, e, "regwait-bound")
	b, err := cb.Elector("regwait-bound", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b's registration to wait for the locked row", func() bool { return blockedBy(t, holder) })
	waitFor(t, 10*time.Second, "b to give up waiting and back off", func() bool { return sentinel.ElectorWaitBackoffs(b) >= 2 })
	var setting string
	require.NoError(t, pb.QueryRow(ctx, "SHOW lock_timeout").Scan(&setting))
	require.Equal(t, "0", setting, "the wait's lock_timeout leaked to the pool's connection")
	var aborted int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE state = 'idle in transaction (aborted)'").Scan(&aborted))
	require.Zero(t, aborted)
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "b to register once the row is free", func() bool {
		return e.count("leaders", "election = 'regwait-bound' AND waiting_until > pg_catalog.clock_timestamp()") == 1
	})
	require.True(t, a.IsLeader())
	require.False(t, b.IsLeader())
}

// leading starts an Elector of group on c, waits until it leads, and
// returns it with what stops its Run (runElector's).
func leading(t *testing.T, c *sentinel.Client, group string) (*sentinel.Elector, func() error) {
	t.Helper()
	el, err := c.Elector(group, sentinel.ElectorOptions{})
	require.NoError(t, err)
	stop := runElector(t, el)
	waitFor(t, 10*time.Second, "the first elector to lead", el.IsLeader)
	return el, stop
}
