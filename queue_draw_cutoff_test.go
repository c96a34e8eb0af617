package sentinel_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// holdQueueRow locks the queue row of namespace ns, resource res in a
// transaction of its own, as a leave does (FOR NO KEY UPDATE): a draw of
// the resource waits for it. The returned func ends the transaction.
func holdQueueRow(t *testing.T, e *env, ctx context.Context, ns, res string) func() {
	t.Helper()
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = $1 AND resource = $2 FOR NO KEY UPDATE", ns, res)
	require.NoError(t, err)
	done := false
	release := func() {
		if !done {
			done = true
			require.NoError(t, tx.Rollback(context.Background()))
		}
	}
	t.Cleanup(release)
	return release
}

// cutOffClient returns a client on a pool whose new connections are
// refused while the returned flag is set (cutOffDraw sets it). pgx closes
// a connection whose statement was cut off with a cancel request, sent on
// a connection of its own: it races the draw's commit (cancelling the
// draw while it waits for the lock), as it does, or fails to arrive, on a
// network in trouble. Refused, it cannot win, and the draw commits.
func cutOffClient(e *env, cfg *sentinel.Config) (*sentinel.Client, *atomic.Bool) {
	refuse := new(atomic.Bool)
	c := e.clientOn(e.pool(func(pc *pgxpool.Config) {
		dial := pc.ConnConfig.DialFunc
		pc.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if refuse.Load() {
				return nil, errors.New("test: new connections refused")
			}
			return dial(ctx, network, addr)
		}
	}), cfg)
	return c, refuse
}

// cutOffDraw makes a Turn of c on res whose draw is cut off: the queue
// row is locked while its ctx ends and the grace after it passes, and
// released once Turn returned, so that the draw, still waiting on the
// server for the lock, commits after all, its ticket owned by nobody
// live in this process. New connections of c's pool are refused (refuse,
// see cutOffClient) from before the draw until it committed: the pool
// is warmed first, so the draw and the give-back's look have one each.
func cutOffDraw(t *testing.T, e *env, ctx context.Context, c *sentinel.Client, refuse *atomic.Bool, res string, opts ...sentinel.Option) {
	t.Helper()
	var conns []*pgxpool.Conn
	for range 3 {
		cn, err := c.Pool().Acquire(ctx)
		require.NoError(t, err)
		conns = append(conns, cn)
	}
	for _, cn := range conns {
		cn.Release()
	}
	var before int
	count := func() int {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+e.table("queue_events")+
			" WHERE resource = $1 AND owner = $2 AND event = 'assigned'", res, c.Config().Owner).Scan(&n))
		return n
	}
	before = count()
	release := holdQueueRow(t, e, ctx, "default", res)
	refuse.Store(true)
	defer refuse.Store(false)
	cause := errors.New("the caller gave up")
	tctx, cancel := context.WithTimeoutCause(ctx, 200*time.Millisecond, cause)
	defer cancel()
	_, err := c.Turn(tctx, res, opts...)
	require.ErrorIs(t, err, cause)
	require.ErrorContains(t, err, "cut off")
	release() // the draw, waiting on the server, now mints its ticket and commits
	require.Eventually(t, func() bool { return count() > before }, 10*time.Second, 5*time.Millisecond, "the cut-off draw committed")
}

// A draw in flight when the caller's ctx ends runs on for grantGrace and is
// then cut off; if it commits after all (here: it waited for the queue's
// lock past the grace), its ticket is owned by nobody live in this
// process. It used to stay in the queue until its TTL ended, holding
// everyone behind it: a Turn after it waited the whole TTL (30 s here).
// The draw's mark names its ticket: the client gives it back in the
// background, and the next Turn is served at once.
func TestTurnDrawCutOffThatCommitsLaterIsGivenBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: 30 * time.Second}
	c, refuse := cutOffClient(e, cfg)
	first, err := c.Turn(ctx, "printer") // creates the queue's row
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	cutOffDraw(t, e, ctx, c, refuse, "printer")

	other := e.client(cfg)
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	tn, err := other.Turn(tctx, "printer")
	waited := time.Since(start)
	t.Logf("the next Turn waited %s", waited)
	require.NoError(t, err, "the next Turn waited out the cut-off draw's ticket (TTL 30 s)")
	require.Less(t, waited, 10*time.Second)
	require.NoError(t, tn.Release(ctx))

	// The cut-off draw's ticket is recorded drawn, then cancelled: the
	// turn nobody took.
	var events []string
	rows, err := admin.Query(ctx, "SELECT event FROM "+e.table("queue_events")+
		" WHERE namespace = 'default' AND resource = 'printer' AND ticket = (SELECT max(ticket) FROM "+e.table("queue_events")+
		" WHERE owner = $1) ORDER BY id", c.Config().Owner)
	require.NoError(t, err)
	events, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, events, "cancelled", "the cut-off draw's ticket: %v", events)
}

// The give-back of a cut-off draw's ticket is guarded by the draw's mark,
// the client's owner, the namespace and the resource: a ticket carrying
// the same mark (forced here) but another owner, or the same owner on
// another resource or namespace, is never touched. Client.Close waits for
// the give-back under way.
func TestTurnDrawCutOffGivesBackOnlyItsOwnTicket(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	sentinel.SetDrawNonce(func() int64 { return 42 })
	t.Cleanup(func() { sentinel.SetDrawNonce(nil) })
	c, refuse := cutOffClient(e, &sentinel.Config{DefaultTTL: 30 * time.Second, Owner: "drawer"})
	same := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second, Owner: "drawer"})
	other := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second, Owner: "someone-else"})

	held, err := other.Turn(ctx, "printer") // mark 42, another owner; creates the queue's row
	require.NoError(t, err)
	scanner, err := same.Turn(ctx, "scanner") // mark 42, the same owner, another resource
	require.NoError(t, err)
	elsewhere, err := same.Turn(ctx, "printer", sentinel.WithNamespace("elsewhere")) // ... another namespace
	require.NoError(t, err)
	waiting := make(chan error, 1)
	var behind *sentinel.Turn
	go func() { // mark 42, another owner, waiting behind held on the same resource
		var err error
		behind, err = other.Turn(ctx, "printer")
		waiting <- err
	}()
	require.Eventually(t, func() bool {
		q, err := other.Queue(ctx, "printer")
		return err == nil && len(q.Waiting) == 1
	}, 10*time.Second, 10*time.Millisecond)

	cutOffDraw(t, e, ctx, c, refuse, "printer") // its ticket commits behind both, owned by nobody live
	c.Close()                                   // waits for the give-back

	q, err := other.Queue(ctx, "printer")
	require.NoError(t, err)
	require.NotNil(t, q.Holder)
	require.Equal(t, held.Ticket(), q.Holder.Ticket)
	require.Len(t, q.Waiting, 1, "only the cut-off draw's ticket is given back: %+v", q.Waiting)
	require.Equal(t, "someone-else", q.Waiting[0].Owner)
	for _, tn := range []*sentinel.Turn{held, scanner, elsewhere} {
		require.NoError(t, tn.Err())
	}
	// The cut-off draw did commit its ticket, and it was given back.
	rows, err := admin.Query(ctx, "SELECT event FROM "+e.table("queue_events")+
		" WHERE namespace = 'default' AND resource = 'printer' AND owner = 'drawer' ORDER BY id")
	require.NoError(t, err)
	events, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"assigned", "cancelled"}, events)
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+e.table("tickets")+" WHERE owner = 'drawer'").Scan(&n))
	require.Equal(t, 2, n, "the same owner's tickets on another resource and namespace stay")

	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-waiting)
	require.NoError(t, behind.Release(ctx))
	require.NoError(t, scanner.Release(ctx))
	require.NoError(t, elsewhere.Release(ctx))
}

// A give-back of a cut-off draw's ticket that cannot reach the database
// is retried until Close (or the ticket's TTL) ends it; Close does not wait
// out the outage, and the failure is reported to Observer.ReleaseFailed,
// as a failed give-up is.
func TestTurnDrawCutOffGiveBackThatFailsIsReported(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	unreachable := new(atomic.Bool)
	failures := make(chan sentinel.ReleaseFailure, 4)
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			if unreachable.Load() {
				cc.Host, cc.Port, cc.Fallbacks = "127.0.0.1", 1, nil // connection refused
			}
			return nil
		}
	}), &sentinel.Config{DefaultTTL: 30 * time.Second, ReleaseTimeout: 2 * time.Second,
		Observer: &sentinel.Observer{ReleaseFailed: func(f sentinel.ReleaseFailure) { failures <- f }}})
	first, err := c.Turn(ctx, "printer") // creates the queue's row, and the pool's one connection
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	release := holdQueueRow(t, e, ctx, "default", "printer")
	unreachable.Store(true) // the draw's connection is the last: the give-back cannot connect
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.Turn(tctx, "printer")
	require.ErrorContains(t, err, "cut off")
	release()
	start := time.Now()
	c.Close()
	require.Less(t, time.Since(start), 5*time.Second, "Close waits out no outage")
	select {
	case rf := <-failures:
		t.Log(rf.Err)
		require.Equal(t, "printer", rf.Key)
		require.Equal(t, sentinel.LossTicket, rf.Kind)
		require.ErrorIs(t, rf.Err, sentinel.ErrLeaseLost)
		require.ErrorContains(t, rf.Err, "until it expires")
	case <-time.After(10 * time.Second):
		t.Fatal("the failed give-back was not reported to Observer.ReleaseFailed")
	}
}

// A give-back's looks were all bounded by one expiry, its start plus the
// ticket's TTL. With a TTL shorter than the second look's delay (a
// second), that expiry passed while the give-back waited between looks,
// and the second look ran on an ended context: it failed, and every cut-off
// draw of such a Turn was reported to Observer.ReleaseFailed ("looking for
// it to give it back failed, so it stays in the queue") although the first
// look had given its ticket back. Each look is bounded by its own start
// plus the TTL: a ticket drawn by then has expired after it.
func TestTurnDrawCutOffShortTTLGiveBackIsNotReportedFailed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	failures := make(chan sentinel.ReleaseFailure, 4)
	c, refuse := cutOffClient(e, &sentinel.Config{
		Observer: &sentinel.Observer{ReleaseFailed: func(f sentinel.ReleaseFailure) { failures <- f }}})
	first, err := c.Turn(ctx, "printer") // creates the queue's row
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	const ttl = 300 * time.Millisecond
	cutOffDraw(t, e, ctx, c, refuse, "printer", sentinel.WithTTL(ttl))
	cancelled := func() bool {
		return e.count("queue_events", "resource = 'printer' AND event = 'cancelled'") == 1
	}
	require.Eventually(t, cancelled, 10*time.Second, 5*time.Millisecond, "the first look gave the ticket back")
	time.Sleep(2 * ttl) // past the give-back's start plus the TTL
	c.Close()           // waits for the give-back's second look
	select {
	case f := <-failures:
		t.Fatalf("a give-back that gave its ticket back was reported failed: %v", f.Err)
	default:
	}
	require.Zero(t, e.count("tickets", ""))
}

// A Turn whose draw was in flight as Close began gives its ticket back
// (hb.add fails once Close stopped the heartbeater), but Close did not
// wait for it: it returned at once, the caller closed the pool, as a main
// does after Close, and the give-back found the pool closed. The ticket
// stayed in the queue, by nobody, for its TTL. Close now waits, within its
// deadline, for the draws in flight, and so for that give-back.
func TestCloseWaitsForADrawInFlightToGiveItsTicketBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	p := e.pool(nil)
	c := e.clientOn(p, &sentinel.Config{DefaultTTL: 30 * time.Second})
	first, err := c.Turn(ctx, "printer") // creates the queue's row
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	release := holdQueueRow(t, e, ctx, "default", "printer")
	returned := make(chan error, 1)
	go func() {
		_, err := c.Turn(ctx, "printer")
		returned <- err
	}()
	require.Eventually(t, func() bool { // the draw waits on the server for the queue's lock
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%queue_draw(%'").Scan(&n))
		return n > 0
	}, 10*time.Second, 5*time.Millisecond)
	// Once Close stopped the heartbeater, the draw commits: its ticket is
	// given back, not renewed.
	sentinel.SetCloseAfterStop(c, release)
	c.Close()
	p.Close() // as a main does once Close returned
	err = <-returned
	t.Log(err)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.NotContains(t, err.Error(), "giving it back failed")
	require.Zero(t, e.count("tickets", "expires_at > pg_catalog.clock_timestamp()"), "the ticket drawn as the client closed is given back before Close returns")
}
