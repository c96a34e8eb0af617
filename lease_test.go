package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestLeaseAcquireReleaseAndHolder(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)

	l, err := a.Lease(ctx, "invoice-123")
	require.NoError(t, err)
	require.Positive(t, l.Token())
	require.Nil(t, l.Err())

	_, err = b.Lease(ctx, "invoice-123")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	var held *sentinel.HeldError
	require.ErrorAs(t, err, &held)
	require.NotNil(t, held.Holder)
	require.Equal(t, a.Owner(), held.Holder.Owner)
	require.Equal(t, l.Token(), held.Holder.Token)
	require.Equal(t, a.Config().PID, held.Holder.PID)
	require.Contains(t, err.Error(), a.Owner())

	h, err := b.Holder(ctx, "invoice-123")
	require.NoError(t, err)
	require.Equal(t, a.Owner(), h.Owner)

	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	<-l.Done()
	require.NoError(t, l.Release(ctx), "release is idempotent")
	_, err = b.Holder(ctx, "invoice-123")
	require.ErrorIs(t, err, sentinel.ErrNotFound)

	l2, err := b.Lease(ctx, "invoice-123")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
}

func TestLeaseReleaseAfterContextCancelled(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	work, cancel := context.WithCancel(ctxT(t))
	l, err := c.Lease(work, "job")
	require.NoError(t, err)
	cancel()
	require.NoError(t, l.Release(work))
	require.Equal(t, 0, e.count("leases", "expires_at > clock_timestamp()"))
}

// 100 goroutines race for one key, 50 times: exactly one wins each round.
func TestLeaseExactlyOneWinner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	p := e.pool(func(c *pgxpool.Config) { c.MaxConns = 20 })
	clients := make([]*sentinel.Client, 10)
	for i := range clients {
		clients[i] = e.clientOn(p, nil)
	}
	for round := range 50 {
		key := "race-" + string(rune('a'+round%26)) + strings.Repeat("x", round)
		var wins atomic.Int32
		var winner atomic.Pointer[sentinel.Lease]
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				l, err := clients[g%len(clients)].Lease(ctx, key)
				if err == nil {
					wins.Add(1)
					winner.Store(l)
					return
				}
				if !errors.Is(err, sentinel.ErrNotAcquired) {
					t.Errorf("unexpected error: %v", err)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, wins.Load(), "round %d", round)
		require.NoError(t, winner.Load().Release(ctx))
	}
}

// 1,000 grants through releases, expiries, forced and ordinary takeovers:
// every token is larger than the one before.
func TestLeaseTokensStrictlyIncrease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	var last int64
	check := func(l *sentinel.Lease) {
		t.Helper()
		require.Greater(t, l.Token(), last)
		last = l.Token()
	}
	for i := 0; i < 1000; i++ {
		c := a
		if i%2 == 1 {
			c = b
		}
		key := "k" + string(rune('0'+i%3))
		switch i % 4 {
		case 0: // grant and release
			l, err := c.Lease(ctx, key)
			require.NoError(t, err)
			check(l)
			require.NoError(t, l.Release(ctx))
		case 1: // same owner again
			l, err := c.Lease(ctx, key)
			require.NoError(t, err)
			check(l)
			require.NoError(t, l.Release(ctx))
		case 2: // forced takeover of a held lease
			l, err := c.Lease(ctx, key)
			require.NoError(t, err)
			check(l)
			other := a
			if c == a {
				other = b
			}
			f, err := other.Lease(ctx, key, sentinel.WithForce())
			require.NoError(t, err)
			check(f)
			require.NoError(t, f.Release(ctx))
			require.Error(t, l.Release(ctx))
		case 3: // takeover after expiry
			if i%40 != 3 {
				l, err := c.Lease(ctx, key)
				require.NoError(t, err)
				check(l)
				require.NoError(t, l.Release(ctx))
				continue
			}
			_, err := admin.Exec(ctx, "INSERT INTO "+e.table("leases")+
				` (namespace, key, owner, token, acquired_at, renewed_at, expires_at, hard_expires_at)
				VALUES ('default', $1, 'ghost', nextval('`+e.schema+`.fencing_token'), now(), now(), now() - interval '1s', now())
				ON CONFLICT DO NOTHING`, key)
			require.NoError(t, err)
			l, err := c.Lease(ctx, key)
			require.NoError(t, err)
			check(l)
			require.NoError(t, l.Release(ctx))
		}
	}
}

func TestLeaseStaleTokenRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	old, err := a.Lease(ctx, "acct")
	require.NoError(t, err)
	oldHandle := old.Handle()
	cur, err := b.Lease(ctx, "acct", sentinel.WithForce())
	require.NoError(t, err)

	// The fencing helper refuses the stale token and accepts the current one.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	err = a.VerifyToken(ctx, tx, "acct", old.Token())
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	var stale *sentinel.StaleTokenError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, cur.Token(), stale.Current)
	require.NoError(t, b.VerifyToken(ctx, tx, "acct", cur.Token()))
	require.NoError(t, tx.Rollback(ctx))

	// Heartbeat and release by the stale holder are refused.
	err = old.Heartbeat(ctx)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	<-old.Done()
	_, err = a.RenewHandle(ctx, oldHandle, time.Second)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	require.ErrorIs(t, a.ReleaseHandle(ctx, oldHandle), sentinel.ErrStaleToken)
	require.ErrorIs(t, old.Release(ctx), sentinel.ErrLeaseLost)

	// The current holder is untouched by all of it.
	h, err := a.Holder(ctx, "acct")
	require.NoError(t, err)
	require.Equal(t, cur.Token(), h.Token)
	require.Nil(t, cur.Err())

	// A handle carried to another process renews and releases.
	hdl := cur.Handle()
	exp, err := a.RenewHandle(ctx, hdl, 5*time.Second)
	require.NoError(t, err)
	require.True(t, exp.After(h.ExpiresAt))
	require.NoError(t, a.ReleaseHandle(ctx, hdl))
	require.ErrorIs(t, a.ReleaseHandle(ctx, hdl), sentinel.ErrStaleToken)
}

func TestVerifyTokenHoldsOffTakeoverUntilCommit(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	l, err := a.Lease(ctx, "acct", sentinel.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.NoError(t, a.VerifyToken(ctx, tx, "acct", l.Token()))

	// While the guarded transaction is open, even a forced takeover cannot
	// be granted; a non-blocking one says so at once instead of waiting.
	start := time.Now()
	_, err = b.Lease(ctx, "acct", sentinel.WithForce())
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	require.Less(t, time.Since(start), 2*time.Second, "a non-blocking Lease must not wait for the row lock")

	got := make(chan error, 1)
	go func() {
		_, err := b.Lease(ctx, "acct", sentinel.WithForce(), sentinel.WithWait())
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("takeover did not wait for the fencing transaction: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-got)
}

// Heartbeats keep a lease alive well past its TTL, in one statement per
// tick for many leases.
func TestHeartbeatKeepsLeasesAlive(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// 600 ms, not less: with 300 ms a renewal delayed by a loaded machine
	// (CI beside other work) missed its deadline.
	c := e.client(&sentinel.Config{DefaultTTL: 600 * time.Millisecond})
	var ls []*sentinel.Lease
	for i := range 50 {
		l, err := c.Lease(ctx, "hb-"+string(rune('A'+i)))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	time.Sleep(2 * time.Second) // > 3 TTLs
	for _, l := range ls {
		require.Nil(t, l.Err())
	}
	require.Equal(t, 50, e.count("leases", "expires_at > clock_timestamp()"))
}

// A hard TTL ends the lease however healthy the heartbeats.
func TestLeaseHardTTL(t *testing.T) {
	e := newEnv(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	start := time.Now()
	l, err := c.Lease(ctxT(t), "bounded", sentinel.WithTTL(400*time.Millisecond), sentinel.WithHardTTL(1200*time.Millisecond))
	require.NoError(t, err)
	<-l.Done()
	require.GreaterOrEqual(t, time.Since(start), 900*time.Millisecond, "heartbeats extended it past the TTL")
	require.True(t, stillAlive(t, e, "bounded", l.Token()), "Done closed before the hard expiry on the database clock")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	require.ErrorIs(t, l.Err(), sentinel.ErrHardTTL)
}

// stillAlive reports whether the lease row is unexpired on the database clock.
func stillAlive(t *testing.T, e *env, key string, token int64) bool {
	var alive bool
	err := admin.QueryRow(context.Background(), "SELECT expires_at > clock_timestamp() FROM "+e.table("leases")+
		" WHERE key = $1 AND token = $2", key, token).Scan(&alive)
	require.NoError(t, err)
	return alive
}

// Heartbeats stop reaching the database because every connection of the
// client is killed and no new one can be made: Done closes while the row is
// still unexpired on the database clock; then another client acquires.
func TestLeaseLostWhenConnectionsKilled(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var blocked atomic.Bool
	p := e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "victim-" + e.schema
		c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if blocked.Load() {
				return errors.New("network down (test)")
			}
			return nil
		}
	})
	victim := e.clientOn(p, &sentinel.Config{DefaultTTL: time.Second, SafetyMargin: 250 * time.Millisecond})
	l, err := victim.Lease(ctx, "payments-cron")
	require.NoError(t, err)

	blocked.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "victim-"+e.schema)
	require.NoError(t, err)

	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close")
	}
	require.True(t, stillAlive(t, e, "payments-cron", l.Token()), "Done must close before the database expiry")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)

	other := e.client(nil)
	l2, err := other.Lease(ctx, "payments-cron", sentinel.WithWait())
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
}

// The heartbeat is blocked (the row is locked by a long transaction): Done
// closes before the database expiry, then another client acquires.
func TestLeaseLostWhenHeartbeatBlocked(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	victim := e.client(&sentinel.Config{DefaultTTL: time.Second, SafetyMargin: 250 * time.Millisecond})
	l, err := victim.Lease(ctx, "blocked")
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'blocked' FOR UPDATE")
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close")
	}
	require.True(t, stillAlive(t, e, "blocked", l.Token()), "Done must close before the database expiry")
	require.NoError(t, tx.Rollback(ctx))
	l2, err := e.client(nil).Lease(ctx, "blocked", sentinel.WithWait())
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
}

// A waiter wakes on the holder's release (NOTIFY), well before the TTL.
func TestLeaseWaitWakesOnRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(&sentinel.Config{DefaultTTL: 10 * time.Second}), e.client(nil)
	l, err := a.Lease(ctx, "handover")
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l2, err := b.Lease(ctx, "handover", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	select {
	case l2 := <-got:
		require.Less(t, time.Since(released), 2*time.Second)
		require.Greater(t, l2.Token(), l.Token())
	case <-time.After(8 * time.Second):
		t.Fatal("waiter was not woken by the release")
	}
}

// A waiter with a deadline gives up with the context's error and the holder.
func TestLeaseWaitTimeout(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(nil), e.client(nil)
	_, err := a.Lease(ctxT(t), "busy")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	_, err = b.Lease(ctx, "busy", sentinel.WithWait())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
}

// Statement counts: acquire 1, release 1, one heartbeat tick for N leases 1.
func TestLeaseStatementCounts(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Hour})
	e.stmts.n.Store(0)
	l, err := c.Lease(ctx, "one")
	require.NoError(t, err)
	require.EqualValues(t, 1, e.stmts.n.Load(), "acquire")
	e.stmts.n.Store(0)
	require.NoError(t, l.Release(ctx))
	require.EqualValues(t, 1, e.stmts.n.Load(), "release")

	// 200 leases with a 600ms TTL renew every 200ms. They are acquired
	// spread over more than one interval, so they start out due at
	// different moments: the heartbeat may use two statements per
	// interval while their ticks merge, and one per interval after.
	hc := e.client(&sentinel.Config{DefaultTTL: 600 * time.Millisecond})
	start := time.Now()
	for i := range 200 {
		_, err := hc.Lease(ctx, "n-"+string(rune(0x100+i)))
		require.NoError(t, err)
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * 1500 * time.Microsecond)))
	}
	e.stmts.n.Store(0)
	time.Sleep(1100 * time.Millisecond) // five and a half intervals
	merging := e.stmts.n.Load()
	require.GreaterOrEqual(t, merging, int64(3))
	require.LessOrEqual(t, merging, int64(12), "at most two renewal statements per interval while ticks merge")
	e.stmts.n.Store(0)
	time.Sleep(1100 * time.Millisecond)
	merged := e.stmts.n.Load()
	require.GreaterOrEqual(t, merged, int64(3))
	require.LessOrEqual(t, merged, int64(7), "200 leases must renew in one statement per tick")
}

func TestBadInputWritesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	cases := []struct {
		name string
		key  string
		opts []sentinel.Option
	}{
		{"empty key", "", nil},
		{"oversized key", strings.Repeat("k", sentinel.MaxKeyLen+1), nil},
		{"NUL in key", "a\x00b", nil},
		{"invalid UTF-8", "\xff", nil},
		{"negative TTL", "k", []sentinel.Option{sentinel.WithTTL(-time.Second)}},
		{"hard TTL below TTL", "k", []sentinel.Option{sentinel.WithTTL(2 * time.Second), sentinel.WithHardTTL(time.Second)}},
		{"bad namespace", "k", []sentinel.Option{sentinel.WithNamespace("bad\nns")}},
		{"empty-ish namespace", "k", []sentinel.Option{sentinel.WithNamespace(strings.Repeat("n", 200))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Lease(ctx, tc.key, tc.opts...)
			require.ErrorIs(t, err, sentinel.ErrInvalid)
			var ie *sentinel.InvalidError
			require.ErrorAs(t, err, &ie)
			_, err = sentinel.Once(ctx, c, tc.key, func(context.Context) (int, error) {
				t.Fatal("fn must not run")
				return 0, nil
			}, tc.opts...)
			require.ErrorIs(t, err, sentinel.ErrInvalid)
		})
	}
	require.Equal(t, 0, e.count("leases", ""))
	require.Equal(t, 0, e.count("executions", ""))
	require.Equal(t, 0, e.count("events", ""))

	_, err := sentinel.New(nil, nil)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	p := e.pool(nil)
	for _, cfg := range []sentinel.Config{
		{DefaultTTL: -1},
		{DefaultTTL: time.Second, HeartbeatInterval: time.Second},
		{Namespace: "a\tb"},
		{Schema: strings.Repeat("s", 64)},
		{DefaultTTL: time.Second, SafetyMargin: time.Second},
	} {
		_, err := sentinel.New(p, &cfg)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "%+v", cfg)
	}
}

// Close releases every held lease in one statement and wakes waiters.
func TestCloseReleasesAllInOneStatement(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Hour})
	var ls []*sentinel.Lease
	for i := range 20 {
		l, err := c.Lease(ctx, "close-"+string(rune('a'+i)))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	waiter := make(chan error, 1)
	// The waiter on a pool of its own, untraced: e.stmts counts only what
	// the closing client sends.
	waiterC := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = nil }), nil)
	go func() {
		l, err := waiterC.Lease(ctx, "close-a", sentinel.WithWait())
		if err == nil {
			err = l.Release(ctx)
		}
		waiter <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'close-a'") == 1
	})
	e.stmts.n.Store(0)
	c.Close()
	require.Equal(t, int64(2), e.stmts.n.Load(), "one release statement, and its wake-up to the waiter")
	for _, l := range ls {
		require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	}
	select {
	case err := <-waiter:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by Close")
	}
	_, err := c.Lease(ctx, "x")
	require.ErrorIs(t, err, sentinel.ErrClosed)
}

// Waiters in one process are woken one per release, oldest first, and all
// of them get the lease in turn.
func TestLeaseWaitersHandOverInTurn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	waiters := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	first, err := holder.Lease(ctx, "turns")
	require.NoError(t, err)
	const n = 8
	got := make(chan *sentinel.Lease, n)
	for range n {
		go func() {
			l, err := waiters.Lease(ctx, "turns", sentinel.WithWait())
			if err != nil {
				t.Error(err)
				got <- nil
				return
			}
			got <- l
		}()
	}
	// All registered before counting: registrations made at once contend
	// for the key's row (a registration that finds it locked backs off
	// and tries again), and those retries are not what this test counts.
	waitFor(t, 10*time.Second, "the waiters to register", func() bool {
		return e.count("lease_waiters", "key = 'turns'") == n
	})
	time.Sleep(50 * time.Millisecond) // each waits on its registration
	e.stmts.n.Store(0)
	require.NoError(t, first.Release(ctx))
	last := first.Token()
	for range n {
		select {
		case l := <-got:
			require.NotNil(t, l)
			require.Greater(t, l.Token(), last)
			last = l.Token()
			require.NoError(t, l.Release(ctx))
		case <-time.After(20 * time.Second):
			t.Fatal("a waiter never got the lease")
		}
	}
	// One wake-up per release, carrying the grant: two statements per
	// handover (the release, its wake-up; 2n+1 in all), not a re-check
	// per waiter per release (about 90 here).
	require.Less(t, e.stmts.n.Load(), int64(4*n), "waiters stampeded")
}

// A lease lost because the database became unreachable, then released
// (a deferred Release) while it still is: the release fails too, and
// Release must still report the loss (ErrLeaseLost: the work may have
// overlapped another holder), not only the connection error. The same
// for a Turn.
func TestReleaseAfterALossReportsItWhenTheReleaseFails(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var blocked atomic.Bool
	p := e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "lost-release-" + e.schema
		c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if blocked.Load() {
				return errors.New("network down (test)")
			}
			return nil
		}
	})
	victim := e.clientOn(p, &sentinel.Config{DefaultTTL: time.Second, SafetyMargin: 250 * time.Millisecond,
		ReleaseTimeout: 500 * time.Millisecond})
	l, err := victim.Lease(ctx, "lost-release")
	require.NoError(t, err)
	turn, err := victim.Turn(ctx, "lost-release")
	require.NoError(t, err)

	blocked.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "lost-release-"+e.schema)
	require.NoError(t, err)
	for _, done := range []<-chan struct{}{l.Done(), turn.Done()} {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Done did not close")
		}
	}
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	require.ErrorIs(t, turn.Err(), sentinel.ErrLeaseLost)

	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	err = l.Release(rctx)
	require.Error(t, err, "the release statement cannot reach the database")
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "Lease.Release hid the loss: %v", err)
	err = turn.Release(rctx)
	require.Error(t, err, "the leave cannot reach the database")
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "Turn.Release hid the loss: %v", err)
}

// Close ends the lease waits under way: they return ErrClosed having
// withdrawn their registrations, before Close returns, so that the usual
// shutdown (Close, then the pool's Close) leaves no registration behind
// for the next release to hand the key to, stranding it for the waiter's
// TTL.
func TestCloseWithdrawsItsLeaseWaiters(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	held, err := holder.Lease(ctx, "closing-waiter")
	require.NoError(t, err)
	wp := e.pool(nil)
	w := e.clientOn(wp, &sentinel.Config{DefaultTTL: 30 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := w.Lease(ctx, "closing-waiter", sentinel.WithWait())
		done <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'closing-waiter'") == 1
	})
	w.Close()
	wp.Close()
	require.Equal(t, 0, e.count("lease_waiters", "key = 'closing-waiter'"), "Close left its waiter's registration behind")
	select {
	case err := <-done:
		require.ErrorIs(t, err, sentinel.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end with Close")
	}
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err := e.client(nil).Lease(wctx, "closing-waiter", sentinel.WithWait())
	require.NoError(t, err)
	require.Less(t, time.Since(released), 2*time.Second, "the key was handed to the closed client's registration")
	require.NoError(t, l.Release(ctx))
}

// Config.PID is recorded in integer columns. A PID beyond int32 passed New,
// and then every grant and claim of the client failed with pgx's encoding
// error, not ErrInvalid: it is refused by New, as a bad Host is.
func TestConfigPIDBeyondIntegerIsRefused(t *testing.T) {
	e := newEnv(t)
	p := e.pool(nil)
	for _, pid := range []int{math.MaxInt32 + 1, math.MinInt32 - 1} {
		_, err := sentinel.New(p, &sentinel.Config{Schema: e.schema, PID: pid})
		require.ErrorIs(t, err, sentinel.ErrInvalid, "PID %d", pid)
		var ie *sentinel.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "PID", ie.Field)
	}
	c, err := sentinel.New(p, &sentinel.Config{Schema: e.schema, PID: math.MaxInt32})
	require.NoError(t, err)
	defer c.Close()
	l, err := c.Lease(ctxT(t), "k")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctxT(t)))
}

// Option says that an option a call does not take is refused with
// ErrInvalid before anything is written. WithLabel (Turn's) and
// WithAfterEvent (FollowQueues') were taken and ignored by Lease, Do, Once,
// OnceTx and the other calls on a key: a lease or an execution was written
// without the label the caller meant to show.
func TestQueueOptionsAreRefusedElsewhere(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for name, opt := range map[string]sentinel.Option{"WithLabel": sentinel.WithLabel("nightly"), "WithAfterEvent": sentinel.WithAfterEvent(1)} {
		_, err := c.Lease(ctx, "k", opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "Lease %s", name)
		err = c.Do(ctx, "k", func(context.Context, *sentinel.Lease) error {
			t.Fatal("fn ran")
			return nil
		}, opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "Do %s", name)
		_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) {
			t.Fatal("fn ran")
			return 0, nil
		}, opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "Once %s", name)
		_, err = sentinel.OnceTx(ctx, c, "k", func(context.Context, pgx.Tx) (int, error) {
			t.Fatal("fn ran")
			return 0, nil
		}, opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "OnceTx %s", name)
		_, err = c.Reconcile(ctx, "k", opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "Reconcile %s", name)
		_, err = c.History(ctx, "k", opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "History %s", name)
	}
	require.Zero(t, e.count("leases", ""))
	require.Zero(t, e.count("executions", ""))
	require.Zero(t, e.count("events", ""))
	// The calls that take them still do.
	tn, err := c.Turn(ctx, "printer", sentinel.WithLabel("nightly"))
	require.NoError(t, err)
	require.Equal(t, "nightly", tn.Label())
	require.NoError(t, tn.Release(ctx))
	fctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, c.FollowQueues(fctx, nil, func(sentinel.QueueEvent) error { return nil }, sentinel.WithAfterEvent(1)), context.DeadlineExceeded)
}

// A Release whose statement failed (the database unreachable for a
// moment) ends the lease and returns the connection error; called again
// once the database is back, it frees the key. It returned an error
// matching ErrLeaseLost then ("release failed"), which says the work may
// have overlapped another holder, although the row still carried the
// lease's token: nobody else had held the key. The same for a Turn.
func TestReleaseRetriedAfterAFailedReleaseIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var blocked atomic.Bool
	p := e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "retried-release-" + e.schema
		c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if blocked.Load() {
				// A dial error, as a real outage gives (transient).
				return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("network down (test)")}
			}
			return nil
		}
	})
	victim := e.clientOn(p, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond})
	l, err := victim.Lease(ctx, "retried-release")
	require.NoError(t, err)
	turn, err := victim.Turn(ctx, "retried-release")
	require.NoError(t, err)

	blocked.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "retried-release-"+e.schema)
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, l.Release(rctx), "the release statement cannot reach the database")
	require.Error(t, turn.Release(rctx), "the leave cannot reach the database")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost, "a failed release ends the lease")

	blocked.Store(false)
	require.NoError(t, l.Release(ctx), "Lease.Release again, the database back")
	require.NoError(t, turn.Release(ctx), "Turn.Release again, the database back")
	require.NoError(t, l.Release(ctx), "and once more")
	require.NoError(t, turn.Release(ctx), "and once more (Turn)")
	// Err said "lost: release failed" after the retry had released it.
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased, "released by the retry: Err says so")
	require.NotErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	require.ErrorIs(t, turn.Err(), sentinel.ErrReleased, "the same for the Turn")
	require.NotErrorIs(t, turn.Err(), sentinel.ErrLeaseLost)
	other := e.client(nil)
	l2, err := other.Lease(ctx, "retried-release")
	require.NoError(t, err, "the key is free")
	require.NoError(t, l2.Release(ctx))
	require.Zero(t, e.count("tickets", ""), "the ticket is gone")
}

// Lease.Heartbeat's godoc said it returns an error matching ErrLeaseLost
// when the lease is gone; after Release it returns ErrReleased (the lease
// ended, nothing lost) and sends no statement: the godoc now says so.
func TestHeartbeatAfterReleaseReturnsErrReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	e.stmts.n.Store(0)
	err = l.Heartbeat(ctx)
	require.ErrorIs(t, err, sentinel.ErrReleased)
	require.NotErrorIs(t, err, sentinel.ErrLeaseLost)
	require.Zero(t, e.stmts.n.Load(), "no statement sent")

	// At its hard TTL a heartbeat still returns nil, extending nothing.
	capped, err := c.Lease(ctx, "capped", sentinel.WithTTL(time.Second), sentinel.WithHardTTL(time.Second))
	require.NoError(t, err)
	exp := capped.ExpiresAt()
	require.NoError(t, capped.Heartbeat(ctx))
	require.WithinDuration(t, exp, capped.ExpiresAt(), 10*time.Millisecond, "not extended")
	require.NoError(t, capped.Release(ctx))
}

// A nil ctx is refused by the calls on what a client holds, as by the
// calls that acquire it (Lease, Turn, Once): Lease.Release,
// Lease.Heartbeat, Turn.Release, TurnSet.Release, Elector.Run and
// Elector.Resign panicked on it (a nil pointer dereference). Each returns an
// error matching ErrInvalid and leaves what it was called on as it was.
func TestHolderCallsRefuseANilContext(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	turn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	set, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	el, err := c.Elector("g", sentinel.ElectorOptions{})
	require.NoError(t, err)
	leader, err := e.client(nil).Elector("led", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, leader)
	waitFor(t, 30*time.Second, "a leader", leader.IsLeader)

	var nilCtx context.Context // a nil ctx is the point
	for _, call := range []struct {
		name string
		f    func() error
	}{
		{"Lease.Release", func() error { return l.Release(nilCtx) }},
		{"Lease.Heartbeat", func() error { return l.Heartbeat(nilCtx) }},
		{"Turn.Release", func() error { return turn.Release(nilCtx) }},
		{"TurnSet.Release", func() error { return set.Release(nilCtx) }},
		{"Elector.Run", func() error { return el.Run(nilCtx) }},
		{"Elector.Resign", func() error { return leader.Resign(nilCtx) }},
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return call.f()
		}()
		require.ErrorIs(t, err, sentinel.ErrInvalid, call.name)
	}
	require.NoError(t, l.Err(), "the lease is still held")
	require.NoError(t, turn.Err(), "the turn is still held")
	require.NoError(t, set.Err(), "the turns are still held")
	require.True(t, leader.IsLeader(), "the leader still leads")
	require.Equal(t, 1, e.count("leases", "key = 'k'"))
	require.Equal(t, 3, e.count("tickets", ""))
	require.Zero(t, e.count("members", "election = 'g'"), "Run(nil) joined the election")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, turn.Release(ctx))
	require.NoError(t, set.Release(ctx))
}

// stmtHook calls after(sql) when a statement of its pool ends, on the
// goroutine that sent it.
type stmtHook struct {
	after atomic.Pointer[func(sql string)]
}

type stmtSQLKey struct{}

func (h *stmtHook) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtSQLKey{}, d.SQL)
}

func (h *stmtHook) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if f := h.after.Load(); f != nil {
		sql, _ := ctx.Value(stmtSQLKey{}).(string)
		(*f)(sql)
	}
}

// A waiter (WithWait) whose ctx ended as the release ahead of it handed it
// the lease: the wake-up carrying the grant and ctx's end were both there
// when it next looked, and half the time it took the grant, so Lease
// returned a lease (and no error) to a caller whose ctx had ended. It
// returns ctx's error now, and the grant is released at once (handed on to
// the next waiter), not left held for a TTL. The hook holds the waiter
// right after its registration, while the holder releases and ctx ends.
func TestLeaseWaitGrantedAsItsContextEndsIsHandedOn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holderC := e.client(nil)
	hook := &stmtHook{}
	waiter := e.clientOn(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = hook }), &sentinel.Config{DefaultTTL: 30 * time.Second})
	for i := range 8 {
		key := fmt.Sprintf("k%d", i)
		held, err := holderC.Lease(ctx, key)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		var once sync.Once
		f := func(sql string) {
			if !strings.Contains(sql, "lease_acquire_wait") {
				return
			}
			once.Do(func() {
				cancel()
				assert.NoError(t, held.Release(ctx)) // hands the lease to the waiter
				deadline := time.Now().Add(5 * time.Second)
				for sentinel.LeaseGrantsKept(waiter) == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			})
		}
		hook.after.Store(&f)
		l, err := waiter.Lease(wctx, key, sentinel.WithWait())
		hook.after.Store(nil)
		if l != nil {
			_ = l.Release(ctx)
		}
		require.Nil(t, l, "a lease returned after ctx ended (try %d)", i)
		require.ErrorIs(t, err, context.Canceled)
		_, err = holderC.Holder(ctx, key)
		require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was not released (try %d)", i)
	}
}

// A LostError whose cause is its own token found stale says what happened
// once: the stale token's text would name the lease again and repeat the
// reason ("released, expired or taken over").
func TestLostErrorSaysTheCauseOnce(t *testing.T) {
	stale := &sentinel.StaleTokenError{Namespace: "ns", Key: "k", Token: 3}
	err := &sentinel.LostError{Namespace: "ns", Key: "k", Token: 3, Reason: "taken over, released or expired", Cause: stale}
	require.Equal(t, `sentinel: lease "ns"/"k" (token 3) lost: taken over, released or expired`+deadlineMeans, err.Error())
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	stale.Current = 4
	require.Equal(t, `sentinel: lease "ns"/"k" (token 3) lost: taken over, released or expired (token 4 holds it now: writes fenced by token 3 (VerifyToken, a conditional write) cannot have overlapped another holder's, unfenced ones may have)`, err.Error())
	// Another cause is news: it is kept.
	err.Cause = errors.New("connection refused")
	require.Equal(t, `sentinel: lease "ns"/"k" (token 3) lost: taken over, released or expired: connection refused`+deadlineMeans, err.Error())
}

// deadlineMeans is what a lease's LostError for a passed renewal deadline
// (or another loss of the key: its hard TTL, a takeover) adds about the
// work done under it (token 3).
const deadlineMeans = ` (another holder may have taken the key: writes fenced by token 3 (VerifyToken, a conditional write) cannot have overlapped another holder's, unfenced ones may have)`

// A lost term, member row or ticket is named as what it is: an elector's
// lost term read `lease "default"/"scheduler" (token 5) lost`, its term
// called a token, in the term ctx's cause and the logs.
func TestLostErrorNamesWhatWasHeld(t *testing.T) {
	for _, tc := range []struct {
		kind sentinel.LossKind
		want string
	}{
		{"", `sentinel: lease "ns"/"k" (token 3) lost: renewal deadline passed` + deadlineMeans},
		{sentinel.LossLease, `sentinel: lease "ns"/"k" (token 3) lost: renewal deadline passed` + deadlineMeans},
		{sentinel.LossExecution, `sentinel: lease "ns"/"k" (token 3) lost: renewal deadline passed (writes fenced by token 3 (VerifyExecutionToken) are refused once the lease expires on the database clock)`},
		{sentinel.LossLeader, `sentinel: leadership of group "ns"/"k" (term 3) lost: renewal deadline passed (another elector may lead now: writes fenced by term 3 (VerifyTerm) cannot have overlapped another leader's, unfenced ones may have)`},
		{sentinel.LossMember, `sentinel: membership of group "ns"/"k" (member token 3) lost: renewal deadline passed`},
		{sentinel.LossTicket, `sentinel: turn on "ns"/"k" (ticket 3) lost: renewal deadline passed`},
	} {
		err := &sentinel.LostError{Namespace: "ns", Key: "k", Token: 3, Reason: "renewal deadline passed", Kind: tc.kind}
		require.Equal(t, tc.want, err.Error())
	}
	stale := &sentinel.StaleTokenError{Namespace: "ns", Key: "k", Token: 3, Current: 4}
	err := &sentinel.LostError{Namespace: "ns", Key: "k", Token: 3, Reason: "taken over, released or expired", Cause: stale, Kind: sentinel.LossLeader}
	require.Equal(t, `sentinel: leadership of group "ns"/"k" (term 3) lost: taken over, released or expired (term 4 holds it now: writes fenced by term 3 (VerifyTerm) cannot have overlapped another leader's, unfenced ones may have)`, err.Error())

	// The library's own: a term lost to the client's Close.
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var cause error
	done := make(chan struct{})
	el, err2 := c.Elector("scheduler", sentinel.ElectorOptions{OnElected: func(ctx context.Context, term int64) {
		<-ctx.Done()
		cause = context.Cause(ctx)
		close(done)
	}})
	require.NoError(t, err2)
	go func() { _ = el.Run(ctx) }()
	waitFor(t, 10*time.Second, "elected", el.IsLeader)
	c.Close()
	<-done
	var lost *sentinel.LostError
	require.ErrorAs(t, cause, &lost, "%v", cause)
	require.Equal(t, sentinel.LossLeader, lost.Kind)
	require.Contains(t, cause.Error(), `leadership of group "default"/"scheduler" (term `)
}
