package sentinel_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Wake-ups are sent after a handover commits, in a transaction of their
// own (wake.go), so a process killed between the two commits the handover
// and sends no wake-up. These tests make the releasing client send none
// (DropWakes) and check that the one handed over still gets what it was
// handed, by its own re-check, within its TTL: a lost wake-up costs time,
// never a grant.

// A lease released to a registered waiter with no wake-up: the waiter
// finds its grant at its registration's renewal (a third of its TTL).
func TestLostWakeUpLeaseWaiterFindsItsGrant(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 1500 * time.Millisecond
	holderC := e.client(&sentinel.Config{DefaultTTL: time.Minute}) // its expiry would come far too late
	sentinel.DropWakes(holderC)
	waiterC := e.client(&sentinel.Config{DefaultTTL: ttl})
	held, err := holderC.Lease(ctx, "lost-wake")
	require.NoError(t, err)

	got := registeredWaiter(t, e, waiterC, "lost-wake")
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	require.Equal(t, 1, e.count("leases", "key = 'lost-wake' AND granted_waiter IS NOT NULL AND expires_at > now()"),
		"the release handed the lease to the waiter")
	l := <-got
	require.NotNil(t, l)
	took := time.Since(released)
	t.Logf("the waiter found its grant %s after a release that sent no wake-up (TTL %s)", took, ttl)
	// At its registration's renewal (a third of its TTL before the
	// registration would lapse), normally before the grant could expire;
	// on a loaded machine the grant may lapse first, and the waiter then
	// takes the freed key at the same re-check.
	require.Less(t, took, 2*ttl, "by the registration's renewal")
	require.Greater(t, l.Token(), held.Token())
	require.NoError(t, l.Err())
	require.NoError(t, l.Release(ctx))
}

// A turn handed over with no wake-up: the next ticket is served (the leave
// granted it) and its waiter sees so at its re-check, by the expiry of the
// ticket ahead as last read.
func TestLostWakeUpTurnIsStillServed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 1500 * time.Millisecond
	holderC := e.client(&sentinel.Config{DefaultTTL: ttl})
	sentinel.DropWakes(holderC)
	waiterC := e.client(&sentinel.Config{DefaultTTL: ttl})
	first, err := holderC.Turn(ctx, "lost-wake")
	require.NoError(t, err)

	got := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := waiterC.Turn(ctx, "lost-wake")
		if err != nil {
			t.Error(err)
		}
		got <- tn
	}()
	waitFor(t, 10*time.Second, "the second ticket", func() bool {
		return e.count("tickets", "resource = 'lost-wake'") == 2
	})
	time.Sleep(200 * time.Millisecond) // its serving check made, it sleeps
	released := time.Now()
	require.NoError(t, first.Release(ctx))
	tn := <-got
	require.NotNil(t, tn)
	took := time.Since(released)
	t.Logf("the next turn was served %s after a release that sent no wake-up (TTL %s)", took, ttl)
	require.Less(t, took, 2*ttl+time.Second, "by the waiter's re-check at the expiry of the ticket ahead")
	require.Greater(t, tn.Ticket(), first.Ticket())
	require.NoError(t, tn.Release(ctx))
}

// A resignation handing the term to its named successor with no wake-up:
// the successor campaigns at the old term's expiry, as it last read it,
// and finds the term handed to it. The old leader's TTL is shorter than
// the successor's, so that expiry comes before the handed term's; with
// equal TTLs the two can fall together, and the successor may then find
// its unused term expired and the old leader, its hold-off over, elected
// again: a lost wake-up may cost a handed-over term, never a second
// leader.
func TestLostWakeUpResignSuccessorLeads(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second
	var ts tenures
	leaderC := e.client(&sentinel.Config{DefaultTTL: ttl / 2})
	sentinel.DropWakes(leaderC)
	a, err := leaderC.Elector("lost-wake", sentinel.ElectorOptions{OnElected: ts.onElected(0, nil)})
	require.NoError(t, err)
	runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	b, err := e.client(&sentinel.Config{DefaultTTL: ttl}).Elector("lost-wake", sentinel.ElectorOptions{OnElected: ts.onElected(1, nil)})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to name itself successor", func() bool {
		return e.count("leaders", "election = 'lost-wake' AND next_member IS NOT NULL") == 1
	})
	time.Sleep(200 * time.Millisecond) // registered, it sleeps
	begin := time.Now()
	require.NoError(t, a.Resign(ctx))
	waitFor(t, ttl+time.Second, "b to lead", b.IsLeader)
	t.Logf("the successor led %s after a resignation that sent no wake-up (TTL %s)", time.Since(begin), ttl)
	require.Equal(t, 1, e.count("leaders", "election = 'lost-wake' AND term_member IS NOT NULL AND term = $1", b.Term()),
		"the term b leads is the one the resignation handed it")
	checkTenures(t, ts.snapshot())
}

// A lease handed to a waiter by a release: the wake-up carries the grant,
// so the waiter holds it without a statement of its own (the release and
// its wake-up are the only statements), and the lease it returns is the
// grant the database holds (its token renews).
func TestLeaseHandoverTakesTheGrantFromTheWakeUp(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holderC := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	var waiterStmts counter // the waiter's pool's own statements
	waiterC := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = &waiterStmts }),
		&sentinel.Config{DefaultTTL: time.Minute, Owner: "the-waiter"})
	held, err := holderC.Lease(ctx, "carried")
	require.NoError(t, err)
	got := registeredWaiter(t, e, waiterC, "carried")
	time.Sleep(200 * time.Millisecond) // registered and subscribed, it sleeps
	waiterStmts.n.Store(0)
	require.NoError(t, held.Release(ctx))
	l := <-got
	require.NotNil(t, l)
	require.Zero(t, waiterStmts.n.Load(), "the waiter sent no statement: it took the grant from the wake-up")
	require.Equal(t, 1, e.count("leases", "key = 'carried' AND owner = 'the-waiter' AND token = $1", l.Token()))
	require.Greater(t, l.Token(), held.Token())
	var expires time.Time
	require.NoError(t, admin.QueryRow(ctx, "SELECT expires_at FROM "+e.schema+".leases WHERE key = 'carried'").Scan(&expires))
	require.True(t, l.ExpiresAt().Equal(expires), "ExpiresAt %s is the row's %s", l.ExpiresAt(), expires)
	require.True(t, l.Deadline().Before(expires), "the local deadline errs on the early side")
	require.NoError(t, l.Heartbeat(ctx), "the token the wake-up carried is the grant's")
	require.NoError(t, l.Release(ctx))
}

// registeredWaiter starts a Lease(WithWait) of key on c and returns once
// it is registered; the lease comes on the channel.
func registeredWaiter(t *testing.T, e *env, c *sentinel.Client, key string) <-chan *sentinel.Lease {
	t.Helper()
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := c.Lease(ctxT(t), key, sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = $1", key) == 1
	})
	return got
}

// A term handed to a registered successor: the resignation's wake-up
// carries the grant, so the successor leads without a statement of its
// own; and a wake-up replayed later, for a term the successor already led
// and gave up, is not trusted (the successor campaigns, reads the live
// leader and follows).
func TestElectorSuccessorLeadsFromTheWakeUp(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var ts tenures
	aC := e.client(&sentinel.Config{DefaultTTL: time.Minute, Owner: "a"})
	var bStmts counter // b's pool's own statements
	bC := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = &bStmts }),
		&sentinel.Config{DefaultTTL: time.Minute, Owner: "b"})
	a, err := aC.Elector("carried-term", sentinel.ElectorOptions{OnElected: ts.onElected(0, nil)})
	require.NoError(t, err)
	runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)

	var atStart atomic.Int64
	atStart.Store(-1)
	b, err := bC.Elector("carried-term", sentinel.ElectorOptions{OnElected: ts.onElected(1, func(ctx context.Context) {
		atStart.CompareAndSwap(-1, bStmts.n.Load())
		<-ctx.Done()
	})})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to name itself successor", func() bool {
		return e.count("leaders", "election = 'carried-term' AND next_owner = 'b'") == 1
	})
	time.Sleep(200 * time.Millisecond) // registered, it sleeps

	// The wake-ups, as a listener of b's process's channel (migration 14)
	// sees them.
	var channel string
	require.NoError(t, admin.QueryRow(ctx, "SELECT next_channel FROM "+e.table("leaders")+
		" WHERE election = 'carried-term'").Scan(&channel))
	require.True(t, strings.HasPrefix(channel, "sentinel_hub."), "b's channel %q", channel)
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), "UNLISTEN *") }()
	bStmts.n.Store(0)
	require.NoError(t, a.Resign(ctx))
	waitFor(t, 10*time.Second, "b to lead", b.IsLeader)
	// IsLeader turns true as the term starts, before OnElected's goroutine
	// runs: wait for the call.
	waitFor(t, 10*time.Second, "b's OnElected to be called", func() bool { return atStart.Load() != -1 })
	require.Zero(t, atStart.Load(), "b sent no statement before it led: it took its term from the wake-up")
	require.Equal(t, 1, e.count("leaders", "election = 'carried-term' AND owner = 'b' AND term_member IS NOT NULL AND term = $1", b.Term()),
		"the term b leads is the one the resignation handed it")

	var handed string // the wake-up that handed b its term
	for handed == "" {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.Conn().WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "the resignation's 'h' wake-up")
		if strings.HasPrefix(n.Payload, "h") {
			handed = n.Payload
		}
	}

	// b gives the term back to a, then names itself successor again.
	waitFor(t, 10*time.Second, "a to name itself successor", func() bool {
		return e.count("leaders", "election = 'carried-term' AND next_owner = 'a'") == 1
	})
	require.NoError(t, b.Resign(ctx))
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	waitFor(t, 10*time.Second, "b to name itself successor again", func() bool {
		return e.count("leaders", "election = 'carried-term' AND next_owner = 'b'") == 1
	})
	_, err = admin.Exec(ctx, "SELECT pg_catalog.pg_notify($1, $2)", sentinel.Channel(aC), handed)
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	require.False(t, b.IsLeader(), "a replayed wake-up of a term b gave up made it lead again")
	require.True(t, a.IsLeader())
	checkTenures(t, ts.snapshot())
}
