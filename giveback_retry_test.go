package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// giveBackTTL is long, so a grant left held after its give-back failed
// shows: its key would stay held for a minute instead of being free.
const giveBackTTL = time.Minute

// cutOnRowTracer, when armed, ends the connection of the first statement
// containing match that returns a row (its backend terminated, and gone),
// then calls then, before the statement's caller sees the row: the next
// statement on that connection fails with a dropped connection.
type cutOnRowTracer struct {
	match string
	then  atomic.Pointer[func()]
	t     *testing.T
}

func (c *cutOnRowTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.match) {
		return context.WithValue(ctx, c, true)
	}
	return ctx
}

func (c *cutOnRowTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryEndData) {
	if ctx.Value(c) == nil || d.Err != nil || d.CommandTag.RowsAffected() == 0 {
		return
	}
	if f := c.then.Swap(nil); f != nil {
		terminateAbandoned(c.t, int32(conn.PgConn().PID()))
		(*f)()
	}
}

// giveBackCases are the two reasons a grant is given back unused: the
// caller's ctx ended as it came, or the client began to close.
var giveBackCases = []struct {
	name  string
	close bool
}{{"ctx ended", false}, {"client closed", true}}

// cutThen is what the tracer does once it cut the connection: cancel the
// caller's ctx, or start Close and let it begin.
func cutThen(close bool, cancel context.CancelFunc, c *sentinel.Client) func() {
	if close {
		return func() {
			go c.Close()
			time.Sleep(200 * time.Millisecond) // Close has begun
		}
	}
	return func() { cancel() }
}

// requireLeaseFree asserts that another client acquires key at once, not
// after the grant's TTL.
func requireLeaseFree(t *testing.T, e *env, key string) {
	t.Helper()
	require.Zero(t, e.count("leases", "key = $1 AND expires_at > pg_catalog.clock_timestamp()", key), "the grant was given back")
	l, err := e.client(nil).Lease(ctxT(t), key)
	require.NoError(t, err, "another client acquires the key at once")
	require.NoError(t, l.Release(ctxT(t)))
}

// A lease granted as the caller's ctx ends (or as the client closes) is
// given back at once. That give-back was one statement: one dropped
// connection (the backend terminated, a reset) left the key held, by
// nobody, until its TTL ran out, and its waiters asleep that long. It is
// now retried within ReleaseTimeout and the grant's expiry.
func TestLeaseGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	testGiveBackAfterCut(t, "INSERT INTO", func(ctx context.Context, c *sentinel.Client) (any, error) { // the acquire statement
		return c.Lease(ctx, "k")
	}, func(t *testing.T, e *env) { requireLeaseFree(t, e, "k") })
}

// testGiveBackAfterCut runs get (a Lease, a Turn) on a client whose one
// pool connection is cut as the reply of the statement containing match
// (the grant, the draw) arrives, with the caller's ctx ending or the
// client closing meanwhile (giveBackCases): get returns nothing and the
// cause, the give-back after the cut is retried (no "giving it back
// failed", no failed release reported), and free finds the key free.
func testGiveBackAfterCut(t *testing.T, match string, get func(context.Context, *sentinel.Client) (any, error), free func(*testing.T, *env)) {
	for _, tc := range giveBackCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			tr := &cutOnRowTracer{match: match, t: t}
			var failed atomic.Int32
			c := e.clientOn(e.pool(func(c *pgxpool.Config) {
				c.MaxConns = 1 // the give-back goes on the cut connection
				c.ConnConfig.Tracer = tr
			}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second,
				Observer: &sentinel.Observer{ReleaseFailed: func(sentinel.ReleaseFailure) { failed.Add(1) }}})
			gctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			f := cutThen(tc.close, cancel, c)
			tr.then.Store(&f)
			got, err := get(gctx, c)
			require.Nil(t, tr.then.Load(), "the connection was not cut")
			require.Nil(t, got)
			t.Log(err)
			if tc.close {
				require.ErrorIs(t, err, sentinel.ErrClosed)
			} else {
				require.ErrorIs(t, err, context.Canceled)
			}
			require.NotContains(t, err.Error(), "giving it back failed")
			require.Zero(t, failed.Load(), "no failed release reported")
			free(t, e)
		})
	}
}

// A lease a release hands over to a waiter whose ctx ended meanwhile (or
// whose client began to close) is given back at once, handed on to the
// next waiter. That give-back was one statement too: one dropped
// connection left the key held until the grant's TTL ran out.
func TestHandedOverLeaseGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	for _, tc := range giveBackCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			holder, err := e.client(nil).Lease(ctx, "k", sentinel.WithTTL(giveBackTTL))
			require.NoError(t, err)
			// The waiter reads its grant (no listener): the read is the
			// statement cut, and its row the grant the waiter gives back.
			tr := &cutOnRowTracer{match: "t.granted_waiter = $4", t: t}
			var failed atomic.Int32
			c := e.clientOn(e.pool(func(c *pgxpool.Config) {
				c.MaxConns = 1 // the give-back goes on the read's connection, cut
				c.ConnConfig.Tracer = tr
			}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, DisableListen: true,
				WaitRecheck: 50 * time.Millisecond,
				Observer:    &sentinel.Observer{ReleaseFailed: func(sentinel.ReleaseFailure) { failed.Add(1) }}})
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			f := cutThen(tc.close, cancel, c)
			tr.then.Store(&f)
			errc := make(chan error, 1)
			go func() {
				l, err := c.Lease(wctx, "k", sentinel.WithWait(), sentinel.WithTTL(giveBackTTL))
				if l != nil {
					err = errors.New("the waiter got the lease")
				}
				errc <- err
			}()
			waitFor(t, 10*time.Second, "the waiter to register", func() bool { return e.count("lease_waiters", "") == 1 })
			require.NoError(t, holder.Release(ctx)) // hands the lease to the waiter
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter did not return")
			}
			require.Nil(t, tr.then.Load(), "the grant read's connection was not cut")
			t.Log(err)
			if tc.close {
				require.ErrorIs(t, err, sentinel.ErrClosed)
			} else {
				require.ErrorIs(t, err, context.Canceled)
			}
			require.NotContains(t, err.Error(), "giving it back failed")
			require.Zero(t, failed.Load(), "no failed release reported")
			requireLeaseFree(t, e, "k")
		})
	}
}

// A term won as the client closes is given back at once, without
// starting OnElected. That give-back was one statement: one dropped
// connection left the group without a leader for the term's TTL, its
// followers asleep that long.
func TestTermWonAsClientClosesGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &cutOnRowTracer{match: "mp AS (", t: t} // the campaign
	var failed atomic.Int32
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 1 // the give-back goes on the campaign's connection, cut
		c.ConnConfig.Tracer = tr
	}), &sentinel.Config{DefaultTTL: closeRaceTTL, ReleaseTimeout: 10 * time.Second,
		Observer: &sentinel.Observer{ReleaseFailed: func(sentinel.ReleaseFailure) { failed.Add(1) }}})
	var started atomic.Int32
	el, err := c.Elector("g", sentinel.ElectorOptions{OnElected: func(ctx context.Context, term int64) {
		started.Add(1)
		<-ctx.Done()
	}})
	require.NoError(t, err)
	f := cutThen(true, nil, c)
	tr.then.Store(&f)
	errc := make(chan error, 1)
	go func() { errc <- el.Run(ctx) }()
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	require.Nil(t, tr.then.Load(), "the campaign's connection was not cut")
	t.Log(err)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.NotContains(t, err.Error(), "giving it back failed")
	require.Zero(t, started.Load(), "OnElected started for a term won as the client closed")
	require.Zero(t, failed.Load(), "no failed release reported")
	checkNoGrantSurvives(t, e, "g")
}

// A give-back that finally fails (here the connection dropped and the
// database stays unreachable until ReleaseTimeout runs out) says the key
// stays held until it expires, with the last attempt's error, and is
// reported to Observer.ReleaseFailed as a failed release is.
func TestLeaseGiveBackThatFailsIsReported(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, tr, unreachable, failures := unreachableAfterCut(t, e, "INSERT INTO")
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() {
		unreachable.Store(true)
		cancel()
	}
	tr.then.Store(&f)
	_, err := c.Lease(lctx, "k")
	require.Nil(t, tr.then.Load(), "the grant's connection was not cut")
	t.Log(err)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "giving it back failed, so it is free only when it expires")
	require.NotContains(t, err.Error(), "deadline exceeded", "the last attempt's error, not the timeout after it")
	select {
	case rf := <-failures:
		require.Equal(t, "k", rf.Key)
		require.Equal(t, sentinel.LossLease, rf.Kind)
		require.ErrorIs(t, rf.Err, sentinel.ErrLeaseLost)
		require.ErrorContains(t, rf.Err, "until it expires")
	case <-time.After(5 * time.Second):
		t.Fatal("the failed give-back was not reported to Observer.ReleaseFailed")
	}
	require.Equal(t, 1, e.count("leases", "key = 'k' AND expires_at > pg_catalog.clock_timestamp()"), "held until it expires")
}

// unreachableAfterCut is a client on a pool of one connection, cut as the
// reply of the statement containing match arrives (arm tr.then), that can
// no longer connect once unreachable is set (connection refused): every
// give-back attempt after the cut fails until ReleaseTimeout (1s) runs
// out. Observer.ReleaseFailed reports go to failures.
func unreachableAfterCut(t *testing.T, e *env, match string) (*sentinel.Client, *cutOnRowTracer, *atomic.Bool, chan sentinel.ReleaseFailure) {
	tr := &cutOnRowTracer{match: match, t: t}
	unreachable := new(atomic.Bool)
	failures := make(chan sentinel.ReleaseFailure, 4)
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = tr
		c.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
			if unreachable.Load() {
				cc.Host, cc.Port, cc.Fallbacks = "127.0.0.1", 1, nil // connection refused
			}
			return nil
		}
	}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: time.Second,
		Observer: &sentinel.Observer{ReleaseFailed: func(f sentinel.ReleaseFailure) { failures <- f }}})
	return c, tr, unreachable, failures
}

// requireTurnFree asserts that another client is served on resource at
// once, not after the abandoned ticket's TTL.
func requireTurnFree(t *testing.T, e *env, resource string) {
	t.Helper()
	require.Zero(t, e.count("tickets", "resource = $1 AND expires_at > pg_catalog.clock_timestamp()", resource), "the ticket was given back")
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	tn, err := e.client(nil).Turn(ctx, resource)
	require.NoError(t, err, "another client is served at once")
	require.NoError(t, tn.Release(ctxT(t)))
}

// A ticket served as the caller's ctx ends is given up at once (abandon),
// and so is one drawn as the client closes. Each give-up was one leave
// statement: one dropped connection left the ticket in the queue, by
// nobody, until its TTL ran out, and every ticket behind it asleep that
// long; in the Close case the failure was not even logged nor reported.
// It is now retried within ReleaseTimeout and the ticket's expiry.
func TestTurnGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	testGiveBackAfterCut(t, "queue_draw(", func(ctx context.Context, c *sentinel.Client) (any, error) { // the draw
		return c.Turn(ctx, "r")
	}, func(t *testing.T, e *env) { requireTurnFree(t, e, "r") })
}

// A ticket drawn as the client closes whose give-back finally fails (the
// database unreachable after the cut until ReleaseTimeout runs out) is no
// longer dropped silently: Turn's error says the ticket stays until it
// expires, and Observer.ReleaseFailed is told.
func TestTurnDrawnAsClientClosesGiveBackThatFailsIsReported(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, tr, unreachable, failures := unreachableAfterCut(t, e, "queue_draw(")
	f := func() {
		unreachable.Store(true)
		go c.Close()
		time.Sleep(200 * time.Millisecond) // Close has begun
	}
	tr.then.Store(&f)
	_, err := c.Turn(ctx, "r")
	require.Nil(t, tr.then.Load(), "the draw's connection was not cut")
	t.Log(err)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.ErrorContains(t, err, "giving it back failed, so it is free only when it expires")
	select {
	case rf := <-failures:
		require.Equal(t, "r", rf.Key)
		require.Equal(t, sentinel.LossTicket, rf.Kind)
	case <-time.After(5 * time.Second):
		t.Fatal("the failed give-back was not reported to Observer.ReleaseFailed")
	}
	require.Equal(t, 1, e.count("tickets", "resource = 'r' AND expires_at > pg_catalog.clock_timestamp()"), "held until it expires")
}

// A waiter (Lease WithWait) that gives up withdraws its registration; if
// a release granted it the key meanwhile, it reads that grant and
// releases it, handing the key on. Each of the three statements was one
// attempt: one dropped connection left the registration in place (the
// next release granted the key to it, held by nobody for the TTL), or a
// grant made meanwhile held for its TTL. Each is now retried within
// ReleaseTimeout.
func TestLeaseWaitWithdrawIsRetriedAfterADroppedConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match string // the statement before the one that fails
		grant bool   // the holder releases (grants to the waiter) before it gives up
	}{
		{"withdraw", "lease_acquire_wait(", false},               // the registration; the withdraw fails
		{"grant read", "SELECT EXISTS (SELECT 1 FROM dw)", true}, // the withdraw; the read of the grant fails
		{"release", "t.granted_waiter = $4", true},               // the read of the grant; its release fails
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			holder, err := e.client(nil).Lease(ctx, "k", sentinel.WithTTL(giveBackTTL))
			require.NoError(t, err)
			tr := &cutOnRowTracer{match: tc.match, t: t}
			var failed atomic.Int32
			c := e.clientOn(e.pool(func(c *pgxpool.Config) {
				c.MaxConns = 1 // the next statement goes on the cut connection
				c.ConnConfig.Tracer = tr
			}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, DisableListen: true,
				WaitRecheck: time.Minute, // the waiter does not read its grant on its own
				Observer:    &sentinel.Observer{ReleaseFailed: func(sentinel.ReleaseFailure) { failed.Add(1) }}})
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if !tc.grant {
				f := func() { cancel() }
				tr.then.Store(&f)
			}
			errc := make(chan error, 1)
			go func() {
				l, err := c.Lease(wctx, "k", sentinel.WithWait(), sentinel.WithTTL(giveBackTTL))
				if l != nil {
					err = errors.New("the waiter got the lease")
				}
				errc <- err
			}()
			if tc.grant {
				waitFor(t, 10*time.Second, "the waiter to register", func() bool { return e.count("lease_waiters", "") == 1 })
				time.Sleep(200 * time.Millisecond)      // the waiter's read of its (no) grant is done: it sleeps
				require.NoError(t, holder.Release(ctx)) // grants the lease to the waiter, asleep
				f := func() {}
				tr.then.Store(&f)
				cancel()
			}
			select {
			case err = <-errc:
			case <-time.After(30 * time.Second):
				t.Fatal("the waiter did not return")
			}
			require.Nil(t, tr.then.Load(), "the connection was not cut")
			t.Log(err)
			require.ErrorIs(t, err, context.Canceled)
			if !tc.grant {
				require.Zero(t, e.count("lease_waiters", ""), "the registration was withdrawn")
				require.NoError(t, holder.Release(ctx))
			}
			require.Zero(t, failed.Load(), "no failed release reported")
			requireLeaseFree(t, e, "k")
		})
	}
}

// An elector that stops removes its member row and gives back a term a
// resignation handed to it meanwhile (leave). That statement was one
// attempt: one dropped connection left the member row live for its TTL,
// so the leader's resignation could hand the term to it, held by nobody,
// every follower asleep until it expired. It is now retried within
// ReleaseTimeout and the member row's expiry.
func TestElectorLeaveIsRetriedAfterADroppedConnection(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	leader, err := e.client(&sentinel.Config{DefaultTTL: giveBackTTL}).Elector("g", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopLeader := runElector(t, leader)
	waitFor(t, 10*time.Second, "the leader to lead", leader.IsLeader)
	tr := &cutOnRowTracer{match: "mp AS (", t: t} // the follower's campaign
	var failed atomic.Int32
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 1 // the leave goes on the campaign's connection, cut
		c.ConnConfig.Tracer = tr
	}), &sentinel.Config{DefaultTTL: giveBackTTL, ReleaseTimeout: 10 * time.Second, Owner: "follower",
		Observer: &sentinel.Observer{ReleaseFailed: func(sentinel.ReleaseFailure) { failed.Add(1) }}})
	el, err := c.Elector("g", sentinel.ElectorOptions{})
	require.NoError(t, err)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() { cancel() }
	tr.then.Store(&f)
	errc := make(chan error, 1)
	go func() { errc <- el.Run(fctx) }()
	select {
	case err = <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Nil(t, tr.then.Load(), "the campaign's connection was not cut")
	t.Log(err)
	require.Zero(t, e.count("members", "owner = 'follower' AND expires_at > pg_catalog.clock_timestamp()"), "the member row was removed")
	require.Zero(t, failed.Load(), "no failed release reported")
	require.NoError(t, stopLeader())
	checkNoGrantSurvives(t, e, "g")
}
