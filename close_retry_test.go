package sentinel_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// cutAtSend, when armed, terminates the backend of the first statement
// (or batch) containing match just before it is sent, and waits until
// the backend is gone: the statement never runs, and its caller sees a
// dropped connection. then, when set, runs after the cut.
type cutAtSend struct {
	match string
	armed atomic.Bool
	then  func()
	t     *testing.T
}

func (c *cutAtSend) cut(conn *pgx.Conn) {
	if c.armed.CompareAndSwap(true, false) {
		terminateAbandoned(c.t, int32(conn.PgConn().PID()))
		if c.then != nil {
			c.then()
		}
	}
}

func (c *cutAtSend) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.match) {
		c.cut(conn)
	}
	return ctx
}

func (c *cutAtSend) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *cutAtSend) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, q := range d.Batch.QueuedQueries {
		if strings.Contains(q.SQL, c.match) {
			c.cut(conn)
			break
		}
	}
	return ctx
}

func (c *cutAtSend) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *cutAtSend) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// closeObserver counts what Close's client reports: failed releases and
// losses.
type closeObserver struct{ failed, lost atomic.Int32 }

func (o *closeObserver) observer() *sentinel.Observer {
	return &sentinel.Observer{
		ReleaseFailed: func(sentinel.ReleaseFailure) { o.failed.Add(1) },
		LeaseLost:     func(sentinel.LeaseLoss) { o.lost.Add(1) },
	}
}

// waitingLease starts a waiter (Lease WithWait) for key on a client of its
// own whose TTL is long, so that it re-checks on its own only every 20 s:
// it gets the key at once only when the release wakes it. It returns when
// the waiter has registered; the channel says when it got the key.
func waitingLease(t *testing.T, e *env, key string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	w := e.client(&sentinel.Config{DefaultTTL: giveBackTTL})
	go func() {
		l, err := w.Lease(ctxT(t), key, sentinel.WithWait())
		if err == nil {
			err = l.Release(ctxT(t))
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = $1", key) == 1
	})
	time.Sleep(100 * time.Millisecond) // its first check is done: it sleeps
	return got
}

// waitingTurn starts a Turn on resource on a client of its own, behind the
// ticket held, with a long TTL (it re-checks on its own only when the
// ticket ahead expires, a minute). It returns once the ticket is drawn.
func waitingTurn(t *testing.T, e *env, resource string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	w := e.client(&sentinel.Config{DefaultTTL: giveBackTTL})
	go func() {
		tn, err := w.Turn(ctxT(t), resource)
		if err == nil {
			err = tn.Release(ctxT(t))
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiting ticket to be drawn", func() bool {
		return e.count("tickets", "resource = $1", resource) == 2
	})
	time.Sleep(100 * time.Millisecond)
	return got
}

// requireServedSoon asserts that a waiter (waitingLease, waitingTurn) got
// what Close gave back within about a second of Close's return, not after
// the TTL.
func requireServedSoon(t *testing.T, got <-chan error, what string) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatalf("the waiter did not get the %s: it stays held, by nobody, until its TTL", what)
	}
}

// Close released the leases it held in one statement, once: one dropped
// connection (the backend terminated as the statement was sent) left
// every key held, by nobody, for its whole TTL (a minute here), the
// waiters asleep that long, and the leases read as failed releases. The
// release is now retried, as every other give-back is: the key is free at
// once, the waiter gets it, and the lease reads as released.
func TestCloseReleaseIsRetriedAfterADroppedConnection(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &cutAtSend{match: "AS v(ns, key, token)", t: t} // sqlReleaseMany, Close's release
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }),
		&sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	got := waitingLease(t, e, "k")
	tr.armed.Store(true)
	c.Close()
	require.False(t, tr.armed.Load(), "the release's connection was not cut")
	requireServedSoon(t, got, "lease")
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
	require.NoError(t, l.Release(ctx))
}

// The same for a turn Close gives back: its leave was one attempt, and a
// dropped connection left the ticket in the queue, by nobody, until it
// expired, and the ticket behind it asleep that long.
func TestCloseTurnGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &cutAtSend{match: "WHEN d.alive THEN", t: t} // sqlTicketLeave, in the leave's batch
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }),
		&sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	tn, err := c.Turn(ctx, "r")
	require.NoError(t, err)
	got := waitingTurn(t, e, "r")
	tr.armed.Store(true)
	c.Close()
	require.False(t, tr.armed.Load(), "the leave's connection was not cut")
	requireServedSoon(t, got, "turn")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased)
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
	require.NoError(t, tn.Release(ctx))
}

// A release whose statement committed but whose reply was lost (the
// connection reset after the server had answered) is retried too, and the
// retry finds nothing left to free: that is the first attempt's doing,
// sent before the lease's local deadline, so nobody could have been
// granted the key by expiry before it arrived. It reads as released, not
// as lost ("taken over, released or expired"), and the waiter, whose
// wake-up went with the lost reply, is woken.
func TestCloseReleaseWhoseReplyIsLostReadsAsReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	var obs closeObserver
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	other, err := c.Lease(ctx, "other")
	require.NoError(t, err)
	got := waitingLease(t, e, "k")
	px.armDrop("AS v(ns, key, token)", 300*time.Millisecond) // sqlReleaseMany
	c.Close()
	require.True(t, px.frozen(), "the release's reply was not cut")
	requireServedSoon(t, got, "lease")
	require.Zero(t, e.count("leases", "key = 'other' AND expires_at > pg_catalog.clock_timestamp()"), "the first attempt committed")
	for _, l := range []*sentinel.Lease{l, other} {
		require.ErrorIs(t, l.Err(), sentinel.ErrReleased, "%s", l.Key())
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
}

// The same for a turn: the retried leave finds the ticket gone, and the
// ticket's own record in the queue's history says the first leave gave it
// up while it was live.
func TestCloseTurnGiveBackWhoseReplyIsLostReadsAsReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	var obs closeObserver
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	tn, err := c.Turn(ctx, "r")
	require.NoError(t, err)
	got := waitingTurn(t, e, "r")
	px.armDrop("WHEN d.alive THEN", 300*time.Millisecond) // sqlTicketLeave
	c.Close()
	require.True(t, px.frozen(), "the leave's reply was not cut")
	requireServedSoon(t, got, "turn")
	require.Equal(t, 1, e.count("queue_events", "ticket = $1 AND event = 'completed'", tn.Ticket()), "the first leave committed")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased)
	require.NoError(t, tn.Release(ctx))
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
}

// Close does not wait out an outage: its release and give-back, cut as
// they are sent with the database unreachable from then on, are not
// retried until ReleaseTimeout runs out; Close returns at once, the lease
// and the turn read as failed releases (ErrClosed), reported to
// Observer.ReleaseFailed, and their rows are held until they expire.
func TestCloseWithTheDatabaseUnreachableReturnsAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const timeout = 3 * time.Second
	var unreachable atomic.Bool
	lt := &cutAtSend{match: "AS v(ns, key, token)", t: t, then: func() { unreachable.Store(true) }}
	tt := &cutAtSend{match: "WHEN d.alive THEN", t: t, then: func() { unreachable.Store(true) }}
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = &multiTracer{lt, tt}
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			if unreachable.Load() {
				cc.Host, cc.Port, cc.Fallbacks = "127.0.0.1", 1, nil // connection refused
			}
			return nil
		}
	}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: timeout, Observer: obs.observer()})
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	tn, err := c.Turn(ctx, "r")
	require.NoError(t, err)
	lt.armed.Store(true)
	tt.armed.Store(true)
	start := time.Now()
	c.Close()
	took := time.Since(start)
	// The first cut makes the database unreachable: the other statement
	// may find no connection to cut, and fail to connect instead.
	require.False(t, lt.armed.Load() && tt.armed.Load(), "no connection was cut")
	require.Less(t, took, timeout, "Close waited out the outage")
	for _, err := range []error{l.Err(), tn.Err()} {
		require.ErrorIs(t, err, sentinel.ErrClosed)
		require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	}
	require.Equal(t, int32(2), obs.failed.Load(), "two failed releases reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
	require.Equal(t, 1, e.count("leases", "key = 'k' AND expires_at > pg_catalog.clock_timestamp()"), "held until it expires")
	require.Equal(t, 1, e.count("tickets", "resource = 'r' AND expires_at > pg_catalog.clock_timestamp()"), "held until it expires")
}

// multiTracer runs the cuts of several cutAtSend.
type multiTracer []*cutAtSend

func (m multiTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	for _, c := range m {
		ctx = c.TraceQueryStart(ctx, conn, d)
	}
	return ctx
}

func (m multiTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (m multiTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	for _, c := range m {
		ctx = c.TraceBatchStart(ctx, conn, d)
	}
	return ctx
}

func (m multiTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (m multiTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// A lease taken over (WithForce) before Close, its holder not told yet
// (its next renewal is far off), and Close's first release attempt cut
// before it ran: the retry finds the row gone. Nothing Close sent freed
// it; the holder's work overlapped the new holder's. It must not read as
// released (before the retry it read as a failed release, matching
// ErrClosed): the retry reads the row, as Lease.Release does after a
// failed release (sqlLeaseUntaken), and finds another grant on it.
func TestCloseRetryDoesNotReadATakeoverBeforeCloseAsReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &cutAtSend{match: "AS v(ns, key, token)", t: t} // sqlReleaseMany, Close's release
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }),
		&sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	forcer := e.client(&sentinel.Config{DefaultTTL: giveBackTTL})
	fl, err := forcer.Lease(ctx, "k", sentinel.WithForce())
	require.NoError(t, err)
	tr.armed.Store(true)
	c.Close()
	require.False(t, tr.armed.Load(), "the release's connection was not cut")
	require.NotErrorIs(t, l.Err(), sentinel.ErrReleased, "a lease taken over before Close read as released")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	require.Equal(t, int32(1), obs.failed.Load()+obs.lost.Load(), "one loss or failed release reported")
	require.Error(t, l.Release(ctx), "Release said the lease taken over was released")
	require.NoError(t, fl.Heartbeat(ctx), "the forcer's lease was freed")
}

// countingCut is a cutAtSend that also counts the statements (or batches)
// containing its match.
type countingCut struct {
	cutAtSend
	n atomic.Int32
}

func (c *countingCut) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.match) {
		c.n.Add(1)
	}
	return c.cutAtSend.TraceQueryStart(ctx, conn, d)
}

// Close with many leases, turns and a wait under way, the release's
// connection cut once: the release is retried in one statement for all
// the leases (not one each), everything is given back, and Close takes
// well under one ReleaseTimeout.
func TestCloseRetryOfManyLeasesIsOneStatement(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const timeout = 3 * time.Second
	tr := &countingCut{cutAtSend: cutAtSend{match: "AS v(ns, key, token)", t: t}}
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }),
		&sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: timeout, Observer: obs.observer()})
	var leases []*sentinel.Lease
	for i := range 50 {
		l, err := c.Lease(ctx, "k"+strconv.Itoa(i))
		require.NoError(t, err)
		leases = append(leases, l)
	}
	var turns []*sentinel.Turn
	for _, r := range []string{"r0", "r1"} {
		tn, err := c.Turn(ctx, r)
		require.NoError(t, err)
		turns = append(turns, tn)
	}
	other := e.client(&sentinel.Config{DefaultTTL: giveBackTTL})
	_, err := other.Lease(ctx, "busy")
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := c.Lease(ctx, "busy", sentinel.WithWait())
		waited <- err
	}()
	waitFor(t, 10*time.Second, "the wait to register", func() bool {
		return e.count("lease_waiters", "key = 'busy'") == 1
	})
	tr.armed.Store(true)
	start := time.Now()
	c.Close()
	took := time.Since(start)
	require.False(t, tr.armed.Load(), "the release's connection was not cut")
	require.Less(t, took, timeout/2, "Close took too long")
	require.Equal(t, int32(2), tr.n.Load(), "release statements sent: the first, cut, and one retry for all")
	require.ErrorIs(t, <-waited, sentinel.ErrClosed)
	for _, l := range leases {
		require.ErrorIs(t, l.Err(), sentinel.ErrReleased, "%s", l.Key())
	}
	for _, tn := range turns {
		require.ErrorIs(t, tn.Err(), sentinel.ErrReleased)
	}
	require.Zero(t, e.count("leases", "key LIKE 'k%' AND expires_at > pg_catalog.clock_timestamp()"), "every lease freed")
	require.Zero(t, e.count("tickets", "resource IN ('r0', 'r1')"), "every ticket given back")
	require.Zero(t, e.count("lease_waiters", "key = 'busy'"), "the wait withdrew")
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
}

// The retried leave finds the ticket gone after a leave whose reply was
// lost, and reading the ticket's record in the queue's history fails (its
// connection cut): the turn reads as a failed release (ErrClosed,
// reported once), not as released nor lost, and a later Release reads the
// record again and makes it good.
func TestCloseTurnGiveBackHistoryReadFailingIsAFailedRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	tr := &cutAtSend{match: "e.by_ticket IS NULL", t: t} // sqlTicketGivenUp
	var obs closeObserver
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		px.route(c)
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		c.ConnConfig.Tracer = tr
	}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Observer: obs.observer()})
	tn, err := c.Turn(ctx, "r")
	require.NoError(t, err)
	px.armDrop("WHEN d.alive THEN", 300*time.Millisecond) // sqlTicketLeave
	tr.armed.Store(true)
	c.Close()
	require.True(t, px.frozen(), "the leave's reply was not cut")
	require.False(t, tr.armed.Load(), "the history read was not cut")
	require.ErrorIs(t, tn.Err(), sentinel.ErrClosed)
	require.ErrorIs(t, tn.Err(), sentinel.ErrLeaseLost)
	require.Equal(t, int32(1), obs.failed.Load(), "one failed release reported")
	require.Zero(t, obs.lost.Load(), "no loss reported")
	require.NoError(t, tn.Release(ctx), "a later Release reads the history again")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased)
	require.NoError(t, tn.Release(ctx))
	require.Equal(t, int32(1), obs.failed.Load())
	require.Zero(t, obs.lost.Load())
}

// A client holding two grants of one key (it took its own key over with
// WithForce; the older lease has not learnt of it yet): Close's release
// frees the row, which carries the newer token, and returns the key, not
// the token. Both leases read as released, the older one's takeover
// hidden: the release's rows are now matched to the newest token of the
// key (tokens only grow), and the older lease reads as lost.
func TestCloseOfTwoGrantsOfOneKeyReadsTheOlderAsLost(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var obs closeObserver
	c := e.client(&sentinel.Config{DefaultTTL: giveBackTTL, Observer: obs.observer()})
	old, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	cur, err := c.Lease(ctx, "k", sentinel.WithForce())
	require.NoError(t, err)
	require.Greater(t, cur.Token(), old.Token())
	c.Close()
	require.ErrorIs(t, cur.Err(), sentinel.ErrReleased)
	require.NotErrorIs(t, old.Err(), sentinel.ErrReleased, "the lease taken over before Close read as released")
	require.ErrorIs(t, old.Err(), sentinel.ErrLeaseLost)
	require.NotErrorIs(t, old.Err(), sentinel.ErrClosed)
	require.Equal(t, int32(1), obs.lost.Load(), "one loss reported")
	require.Zero(t, obs.failed.Load(), "no failed release reported")
	require.Zero(t, e.count("leases", "key = 'k' AND expires_at > pg_catalog.clock_timestamp()"), "the key freed")
}
