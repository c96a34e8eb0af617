package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// lockWaiters is how many backends wait for a lock in a statement on e's
// schema (the second of two waiters on a row waits for the first).
func lockWaiters(t *testing.T, e *env) int {
	var n int
	require.NoError(t, admin.QueryRow(ctxT(t),
		"SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0", e.schema).Scan(&n))
	return n
}

// leaderTerm is the group's term as the leaders row says.
func leaderTerm(t *testing.T, e *env, group string) int64 {
	var term int64
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT term FROM "+e.table("leaders")+" WHERE election = $1", group).Scan(&term))
	return term
}

// Two followers whose campaigns both wait for the lock of the expired
// row: once it is free, exactly one takes the term, the other reads it as
// the leader (the re-check of FOR UPDATE on the newest version), and
// neither backs off.
func TestElectorCampaignLockWaitOneWinner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca := e.client(&sentinel.Config{DefaultTTL: ttl})
	a, stopA := leading(t, ca, "lw-two")
	require.NoError(t, stopA()) // released; a competes no more
	old := leaderTerm(t, e, "lw-two")

	tx, _ := lockLeaderRow(t, e, "lw-two")
	var els []*sentinel.Elector
	for range 2 {
		c := e.client(&sentinel.Config{DefaultTTL: ttl})
		el, err := c.Elector("lw-two", sentinel.ElectorOptions{})
		require.NoError(t, err)
		runElector(t, el)
		els = append(els, el)
	}
	waitFor(t, 10*time.Second, "both campaigns to wait for the row", func() bool { return lockWaiters(t, e) >= 2 })
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "one to lead", func() bool { return els[0].IsLeader() || els[1].IsLeader() })
	time.Sleep(200 * time.Millisecond)
	n, who := leaders(els)
	require.Equal(t, 1, n)
	require.Equal(t, els[who].Term(), leaderTerm(t, e, "lw-two"))
	require.Greater(t, els[who].Term(), old)
	for i, el := range els {
		require.Zerof(t, sentinel.ElectorLockedBackoffs(el), "elector %d backed off", i)
	}
	require.False(t, a.IsLeader())
}

// A guarded transaction of the old term (VerifyTerm's FOR KEY SHARE) holds
// off the next term: the campaign's wait for the row times out, it falls
// back to its backoff, and takes the term only once that transaction ends.
func TestElectorCampaignLockWaitHeldOffByKeyShare(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second // campaignLockWait: 300 ms
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	_, stopA := leading(t, ca, "lw-ks")
	require.NoError(t, stopA()) // released; a competes no more

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leaders")+" WHERE election = $1 FOR KEY SHARE", "lw-ks")
	require.NoError(t, err)
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))

	b, err := cb.Elector("lw-ks", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to wait for the row", func() bool { return blockedBy(t, holder) })
	waitFor(t, 10*time.Second, "b's waits to time out", func() bool { return sentinel.ElectorLockedBackoffs(b) >= 2 })
	require.False(t, b.IsLeader())
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "b to lead", b.IsLeader)
}

// A leader renewing while a follower waits: the holder of the row's lock
// renews the term and commits; the waiting campaign re-checks the newest
// version, finds it live, and reads the leader: no takeover.
func TestElectorCampaignLockWaitNoTakeoverOfARenewedTerm(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 30 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	a, _ := leading(t, ca, "lw-renew")
	term := a.Term()

	// The row expires as the leader's renewal takes its lock: the
	// renewal commits a live version.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "UPDATE "+e.table("leaders")+" SET expires_at = pg_catalog.clock_timestamp() - interval '1 second' WHERE election = $1", "lw-renew")
	require.NoError(t, err)
	// Committed first: b's campaign must see the row expired, and locked.
	require.NoError(t, tx.Commit(ctx))
	tx, holder := lockLeaderRow(t, e, "lw-renew")

	b, err := cb.Elector("lw-renew", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to wait for the row", func() bool { return blockedBy(t, holder) })
	_, err = tx.Exec(ctx, "UPDATE "+e.table("leaders")+" SET expires_at = pg_catalog.clock_timestamp() + interval '30 seconds' WHERE election = $1", "lw-renew")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	time.Sleep(300 * time.Millisecond)
	require.False(t, b.IsLeader())
	require.Equal(t, term, leaderTerm(t, e, "lw-renew"))
	require.Equal(t, term, a.Term())
	require.Zero(t, sentinel.ElectorLockedBackoffs(b))
}

// lock_timeout is set for the wait's transaction only: on a pool of one
// connection, the session's lock_timeout is unchanged after a wait that
// timed out, after one that took the term, and after Run's ctx was
// cancelled in the middle of a wait; the pool keeps working.
func TestElectorCampaignLockWaitLeavesNoSetting(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second
	ca := e.client(&sentinel.Config{DefaultTTL: ttl})
	pb := e.pool(func(c *pgxpool.Config) { c.MaxConns = 1 })
	// b's removal of its member row, as Run stops, waits for the test's
	// lock on the leaders row (sqlLeave): bounded by ReleaseTimeout.
	cb := e.clientOn(pb, &sentinel.Config{DefaultTTL: ttl, ReleaseTimeout: 500 * time.Millisecond})
	show := func() string {
		var s string
		require.NoError(t, pb.QueryRow(ctx, "SHOW lock_timeout").Scan(&s))
		return s
	}
	require.Equal(t, "0", show())
	_, stopA := leading(t, ca, "lw-guc")
	require.NoError(t, stopA()) // released; a competes no more

	tx, holder := lockLeaderRow(t, e, "lw-guc")
	b, err := cb.Elector("lw-guc", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopB := runElector(t, b)
	waitFor(t, 10*time.Second, "b's wait to time out", func() bool { return sentinel.ElectorLockedBackoffs(b) >= 1 })
	require.Equal(t, "0", show(), "lock_timeout leaked after a timed-out wait")
	// Cancel Run in the middle of a wait.
	waitFor(t, 10*time.Second, "b to wait for the row", func() bool { return blockedBy(t, holder) })
	start := time.Now()
	require.NoError(t, stopB())
	t.Logf("Run returned %v after its ctx was cancelled mid-wait", time.Since(start))
	require.Equal(t, "0", show(), "lock_timeout leaked after a cancelled wait")

	// A wait that takes the term (another client on the same pool: b's
	// removal of its member row waited for the test's lock, and timed out).
	cb2 := e.clientOn(pb, &sentinel.Config{DefaultTTL: ttl})
	b2, err := cb2.Elector("lw-guc", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b2)
	waitFor(t, 10*time.Second, "b2 to wait for the row", func() bool { return blockedBy(t, holder) })
	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, 10*time.Second, "b2 to lead", b2.IsLeader)
	require.Equal(t, "0", show(), "lock_timeout leaked after a wait that took the term")
}

// Close during the wait: Run returns ErrClosed within about the wait's
// bound, and a term the wait won as the client closed is given back.
func TestElectorCampaignLockWaitClose(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	_, stopA := leading(t, ca, "lw-close")
	require.NoError(t, stopA()) // released; a competes no more

	tx, holder := lockLeaderRow(t, e, "lw-close")
	b, err := cb.Elector("lw-close", sentinel.ElectorOptions{})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- b.Run(ctx) }()
	waitFor(t, 10*time.Second, "b to wait for the row", func() bool { return blockedBy(t, holder) })
	start := time.Now()
	closed := make(chan struct{})
	go func() { cb.Close(); close(closed) }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, tx.Rollback(ctx)) // the wait wins the row as the client closes
	select {
	case err := <-errc:
		require.ErrorIs(t, err, sentinel.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	<-closed
	t.Logf("Run returned %v after Close", time.Since(start))
	var live bool
	var owner string
	require.NoError(t, admin.QueryRow(ctx, "SELECT expires_at > pg_catalog.clock_timestamp(), owner FROM "+e.table("leaders")+" WHERE election = $1", "lw-close").Scan(&live, &owner))
	require.False(t, live && owner == cb.Owner(), "a term won as the client closed was not given back")
}

// Run's ctx cancelled while its campaign waits for the row's lock: pgx
// drops the connection, but the server does not notice while it waits. If
// the row is freed within the wait's bound, the abandoned statement takes
// a term nobody leads, and every follower sleeps until it expires.
func TestElectorCampaignLockWaitCancelledTakesNoTerm(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	_, stopA := leading(t, ca, "lw-cancel")
	require.NoError(t, stopA()) // released; nobody else runs

	tx, holder := lockLeaderRow(t, e, "lw-cancel")
	b, err := cb.Elector("lw-cancel", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopB := runElector(t, b)
	waitFor(t, 10*time.Second, "b to wait for the row", func() bool { return blockedBy(t, holder) })
	done := make(chan error, 1)
	go func() { done <- stopB() }()
	time.Sleep(30 * time.Millisecond) // the cancel reached the connection
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	time.Sleep(200 * time.Millisecond)
	var live bool
	var owner string
	require.NoError(t, admin.QueryRow(ctx, "SELECT expires_at > pg_catalog.clock_timestamp(), owner FROM "+e.table("leaders")+" WHERE election = $1", "lw-cancel").Scan(&live, &owner))
	require.False(t, live && owner == cb.Owner(), "a campaign cancelled while it waited took a term nobody leads")
}

// Behind PgBouncer in transaction pooling mode (one server connection, so
// every client's transactions share it): the campaign's wait for a locked
// expired row works in each query mode, and its lock_timeout stays inside
// the wait's transaction, after a wait that timed out and after one that
// took the term.
func TestElectorCampaignLockWaitPgBouncer(t *testing.T) {
	ctx := ctxT(t)
	cl, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Skipf("no local PostgreSQL binaries for a private cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	b, err := pgtemp.StartBouncer(ctx, cl.Port(), 1)
	if errors.Is(err, pgtemp.ErrNoBouncer) {
		t.Skip(err)
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	direct, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	modes := map[string]pgx.QueryExecMode{"exec": pgx.QueryExecModeExec, "simple": pgx.QueryExecModeSimpleProtocol}
	if b.SupportsPrepared {
		modes["cache_statement"] = pgx.QueryExecModeCacheStatement
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			newClient := func() (*sentinel.Client, *pgxpool.Pool) {
				cfg, err := pgxpool.ParseConfig(b.URL())
				require.NoError(t, err)
				cfg.ConnConfig.DefaultQueryExecMode = mode
				cfg.MaxConns = 2
				p, err := pgxpool.NewWithConfig(ctx, cfg)
				require.NoError(t, err)
				t.Cleanup(p.Close)
				c, err := sentinel.New(p, &sentinel.Config{Schema: "bouncer_" + name, DefaultTTL: 2 * time.Second, DisableListen: true, WaitRecheck: 100 * time.Millisecond})
				require.NoError(t, err)
				t.Cleanup(c.Close)
				return c, p
			}
			ca, _ := newClient()
			require.NoError(t, ca.Migrate(ctx))
			show := func(p *pgxpool.Pool) string {
				var s string
				require.NoError(t, p.QueryRow(ctx, "SHOW lock_timeout").Scan(&s))
				return s
			}
			_, stopA := leading(t, ca, "g")
			require.NoError(t, stopA())

			tx, err := direct.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			_, err = tx.Exec(ctx, `SELECT 1 FROM `+pgx.Identifier{"bouncer_" + name}.Sanitize()+`.leaders WHERE election = 'g' FOR NO KEY UPDATE`)
			require.NoError(t, err)
			var holder int32
			require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
			waiting := func() bool {
				var n int
				require.NoError(t, direct.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&n))
				return n > 0
			}
			cb, pb := newClient()
			el, err := cb.Elector("g", sentinel.ElectorOptions{})
			require.NoError(t, err)
			runElector(t, el)
			waitFor(t, 10*time.Second, "b's wait to time out", func() bool { return sentinel.ElectorLockedBackoffs(el) >= 1 })
			require.Equal(t, "0", show(pb), "lock_timeout leaked to the server connection after a timed-out wait")
			waitFor(t, 10*time.Second, "b to wait for the row", waiting)
			backoffs := sentinel.ElectorLockedBackoffs(el)
			require.NoError(t, tx.Rollback(ctx))
			waitFor(t, 10*time.Second, "b to lead", el.IsLeader)
			require.Equal(t, backoffs, sentinel.ElectorLockedBackoffs(el), "b backed off instead of waiting for the lock")
			require.Equal(t, "0", show(pb), "lock_timeout leaked to the server connection")
		})
	}
}
