package sentinel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Issue 17.9: Prune covers every table the library writes. Rows of each
// kind older than the retention go (queue history, dead tickets, empty
// queue rows, leader rows nobody holds, member rows of electors gone); live
// ones stay (a live ticket and its history, the current leader, a running
// elector), and other namespaces are left alone unless asked.
func TestPruneQueuesAndElections(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Second})
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := admin.Exec(ctx, q, args...)
		require.NoError(t, err)
	}

	// Queues: "old" was used and released; "other/old" the same in another
	// namespace; "dead" holds a ticket whose client vanished; "live" is
	// held, with a waiter.
	for _, ns := range []string{"default", "other"} {
		tn, err := c.Turn(ctx, "old", sentinel.WithNamespace(ns))
		require.NoError(t, err)
		require.NoError(t, tn.Release(ctx))
	}
	dead, err := c.Turn(ctx, "dead")
	require.NoError(t, err)
	exec("UPDATE " + e.table("tickets") + " SET expires_at = pg_catalog.now() - interval '2 hours' WHERE resource = 'dead'")
	<-dead.Done()
	live, err := c.Turn(ctx, "live", sentinel.WithLabel("holder"))
	require.NoError(t, err)
	waiter := make(chan error, 1)
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() { _, err := c.Turn(wctx, "live", sentinel.WithLabel("waiter")); waiter <- err }()
	waitWaiting(t, c, "live", 1)

	// Elections: "old" was led and resigned (its leader row expired);
	// "live" is led by a running elector; a member row of an elector that
	// died.
	for _, g := range []string{"old", "live"} {
		el, err := c.Elector(g, sentinel.ElectorOptions{TTL: time.Second})
		require.NoError(t, err)
		stop := runElector(t, el)
		waitFor(t, 10*time.Second, g+" elected", el.IsLeader)
		if g == "old" {
			require.NoError(t, stop())
		}
	}
	exec("INSERT INTO " + e.table("members") + " (namespace, election, owner, token, started_at, last_poll, expires_at)" +
		" VALUES ('default', 'live', 'died', 1, now() - interval '3 hours', now() - interval '3 hours', now() - interval '2 hours')")

	// Age everything but the live rows' expiries by two hours.
	exec("UPDATE " + e.table("queue_events") + " SET at = at - interval '2 hours'")
	exec("UPDATE " + e.table("queues") + " SET created_at = created_at - interval '2 hours'")
	exec("UPDATE " + e.table("leaders") + " SET expires_at = expires_at - interval '2 hours' WHERE election = 'old'")
	liveEvents := e.count("queue_events", "resource = 'live'")
	require.Equal(t, 3, liveEvents) // assigned x2, granted

	// Queue follower registrations: long expired, current.
	followers := func(ns, until string) {
		exec("INSERT INTO "+e.table("queue_followers")+" (namespace, following_until) VALUES ($1, now() + $2::interval)"+
			" ON CONFLICT (namespace) DO UPDATE SET following_until = excluded.following_until", ns, until)
	}
	followers("default", "-2 hours")
	followers("followed", "1 hour")

	// Lease waiters' registrations: one left by a waiter that died two
	// hours ago, one current.
	waiterRow := func(key, expires string) {
		exec("INSERT INTO "+e.table("lease_waiters")+" (namespace, key, waiter, owner, ttl_us, expires_at)"+
			" VALUES ('default', $1, 1, 'w', 1000000, now() + $2::interval)", key, expires)
	}
	waiterRow("died-waiting", "-2 hours")
	waiterRow("waiting", "1 hour")

	res, err := c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.Equal(t, 0, e.count("lease_waiters", "key = 'died-waiting'"), "a long-expired registration is pruned")
	require.Equal(t, 1, e.count("lease_waiters", "key = 'waiting'"), "a current one is kept")
	require.Equal(t, 0, e.count("queue_followers", "namespace = 'default'"), "an expired registration is pruned")
	require.Equal(t, 1, e.count("queue_followers", "namespace = 'followed'"), "a current one is kept")
	require.EqualValues(t, 3, res.QueueEvents, "old's assigned, granted, completed")
	require.EqualValues(t, 1, res.Tickets, "the dead ticket")
	require.EqualValues(t, 2, res.Queues, "old and dead, now without tickets")
	require.EqualValues(t, 1, res.Leaders, "old's leader row")
	require.EqualValues(t, 1, res.Members, "the dead elector's row")

	require.Equal(t, liveEvents, e.count("queue_events", "resource = 'live'"), "a live ticket's history is kept")
	require.Equal(t, 2, e.count("tickets", "resource = 'live'"), "live tickets are kept")
	require.Equal(t, 0, e.count("tickets", "resource = 'dead'"))
	require.Equal(t, 1, e.count("queue_events", "resource = 'dead' AND event = 'crashed'"), "the removed ticket is recorded")
	require.Equal(t, 1, e.count("queues", "namespace = 'default'"), "only live's queue row is left")
	require.Equal(t, 1, e.count("leaders", ""), "the current leader is kept")
	require.Equal(t, 0, e.count("leaders", "election = 'old'"))
	require.Equal(t, 1, e.count("members", ""), "the running elector is kept")
	require.Equal(t, 3, e.count("queue_events", "namespace = 'other'"), "other namespaces are left alone")
	require.Equal(t, 1, e.count("queues", "namespace = 'other'"))

	// The live queue still works, in order, and a pruned resource is
	// drawn on again as new.
	require.NoError(t, live.Release(ctx))
	require.NoError(t, <-waiter)
	tn, err := c.Turn(ctx, "old")
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))

	followers("stale", "-2 hours")
	res, err = c.Prune(ctx, time.Hour, sentinel.WithAllNamespaces())
	require.NoError(t, err)
	require.Equal(t, 0, e.count("queue_followers", "namespace = 'stale'"), "an expired registration is pruned")
	require.Equal(t, 1, e.count("queue_followers", "namespace = 'followed'"), "a current one is kept")
	// other's history (3); dead's assigned and granted, kept the first
	// time while its ticket was still there (2); live's holder's, now
	// released (2). The waiter, served and still holding, keeps its own.
	require.EqualValues(t, 7, res.QueueEvents)
	require.Equal(t, 1, e.count("queue_events", "resource = 'live' AND at < now() - interval '1 hour'"), "the waiter's assigned")
	require.EqualValues(t, 1, res.Queues, "other's queue row")
	require.Equal(t, 0, e.count("queue_events", "namespace = 'other'"))
}

// A queue row is pruned only when it has no ticket, even when a draw
// commits a ticket on it while Prune runs: Prune locks the rows it means to
// remove and decides with a snapshot taken after the locks. Here the draw
// is a transaction of the test's own, holding the row's lock as a draw
// does, that inserts a ticket and commits only once Prune waits for it.
func TestPruneKeepsAQueueRowADrawIsFilling(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "press")
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
	_, err = admin.Exec(ctx, "UPDATE "+e.table("queues")+" SET created_at = created_at - interval '2 hours'")
	require.NoError(t, err)

	draw, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = draw.Rollback(ctx) }()
	_, err = draw.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE resource = 'press' FOR UPDATE")
	require.NoError(t, err)
	pruned := make(chan sentinel.PruneResult, 1)
	go func() {
		res, err := c.Prune(ctx, time.Hour)
		if err != nil {
			t.Error(err)
		}
		pruned <- res
	}()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%FROM%queues q%'`).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, time.Millisecond, "Prune waits for the draw's lock")
	_, err = draw.Exec(ctx, "INSERT INTO "+e.table("tickets")+" (namespace, resource, ticket, owner, drawn_at, expires_at)"+
		" VALUES ('default', 'press', 1000, 'drawer', now(), now() + interval '1 hour')")
	require.NoError(t, err)
	require.NoError(t, draw.Commit(ctx))
	res := <-pruned
	require.Zero(t, res.Queues)
	require.Equal(t, 1, e.count("queues", "resource = 'press'"), "the queue row of a live ticket is kept")
}

// Issue 25.4: keys handed back (claimed, no live lease: Retryable, a
// caller that gave up before fn ran, an operator's reset) are pruned like
// completed ones under the same retention, with their history; a claim in
// progress, an uncertain key and a recent hand-back stay.
func TestPruneHandedBackKeys(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := admin.Exec(ctx, q, args...)
		require.NoError(t, err)
	}
	retry := func(key string) {
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) {
			return 0, sentinel.Retryable(errors.New("card network unreachable"))
		})
		require.Error(t, err)
	}
	retry("old-retry")
	retry("new-retry")
	_, err := sentinel.Once(ctx, c, "old-uncertain", func(context.Context) (int, error) { return 0, errors.New("timeout") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	// A claim in progress: OnceTx holds the key claimed while fn runs.
	inFn, release := make(chan struct{}), make(chan struct{})
	letGo := sync.OnceFunc(func() { close(release) })
	defer letGo() // a failed assertion must not leave fn waiting
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.OnceTx(ctx, c, "running", func(context.Context, pgx.Tx) (int, error) {
			close(inFn)
			<-release
			return 1, nil
		})
		done <- err
	}()
	<-inFn

	counts, err := c.ExecutionCounts(ctx, "", false)
	require.NoError(t, err)
	var handedBack, claimedLive int64
	for _, s := range counts {
		switch {
		case s.State == sentinel.StateClaimed && s.HandedBack:
			handedBack += s.Count
		case s.State == sentinel.StateClaimed:
			claimedLive += s.Count
		}
	}
	require.Equal(t, int64(2), handedBack)
	require.Equal(t, int64(1), claimedLive)

	// Age all but new-retry by two hours.
	exec("UPDATE "+e.table("executions")+" SET updated_at = updated_at - interval '2 hours', created_at = created_at - interval '2 hours' WHERE key <> $1", "new-retry")
	exec("UPDATE "+e.table("events")+" SET at = at - interval '2 hours' WHERE key <> $1", "new-retry")
	res, err := c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Equal(t, int64(1), res.HandedBack, "%+v", res)
	require.Equal(t, 0, e.count("executions", "key = 'old-retry'"))
	require.Equal(t, 0, e.count("events", "key = 'old-retry'"), "the history of a pruned key")
	for _, k := range []string{"new-retry", "old-uncertain", "running"} {
		require.Equal(t, 1, e.count("executions", "key = '"+k+"'"), k)
	}
	require.Equal(t, 3, e.count("events", "key = 'old-uncertain'"), "an uncertain key keeps its history")
	letGo()
	require.NoError(t, <-done)

	// A pruned key is new again: the next caller runs fn.
	res2, err := sentinel.Once(ctx, c, "old-retry", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.False(t, res2.Cached)
}
