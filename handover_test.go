package sentinel_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// backends counts the server connections whose application_name is name.
func backends(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n))
	return n
}

// Issue 30: 200 Turn waiters on one client whose pool has 4 connections
// hold at most 6 server connections while they wait (the pool's 4 and the
// process's one LISTEN connection), and are then served in ticket order,
// each handed its turn by its predecessor's release.
func TestTurnManyWaitersBoundedConnections(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	app := fmt.Sprintf("sentinel-bound-%d", time.Now().UnixNano())
	pool := e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	c := e.clientOn(pool, &sentinel.Config{DefaultTTL: 5 * time.Second})
	observer := e.client(nil)
	holder, err := c.Turn(ctx, "bounded")
	require.NoError(t, err)

	const waiters = 200
	var (
		mu    sync.Mutex
		order []int64
		wg    sync.WaitGroup
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := c.Turn(ctx, "bounded")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, tn.Ticket())
			mu.Unlock()
			if err := tn.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	most := 0
	waitFor(t, 60*time.Second, "200 waiters", func() bool {
		most = max(most, backends(t, app))
		q, err := observer.Queue(ctx, "bounded")
		require.NoError(t, err)
		return len(q.Waiting) == waiters
	})
	for range 20 { // a while of waiting
		most = max(most, backends(t, app))
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("at most %d server connections with %d waiters on a pool of 4", most, waiters)
	require.LessOrEqual(t, most, 6)

	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	require.Len(t, order, waiters)
	require.True(t, slices.IsSorted(order), "served out of ticket order")
	most = max(most, backends(t, app))
	require.LessOrEqual(t, most, 6)
	// Each waiter was handed its turn by the release before it.
	h, err := observer.QueueHistory(ctx, "bounded", 0, 10*waiters)
	require.NoError(t, err)
	granted := 0
	for _, ev := range h {
		if ev.Type == sentinel.QueueGranted {
			granted++
		}
	}
	require.Equal(t, waiters+1, granted)
}

// Clients of one process on one pool share one LISTEN connection: ten
// clients, each with a waiter, add one server connection, not ten, and
// every waiter is still woken by the release it waits for.
func TestClientsOnOnePoolShareOneListener(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	app := fmt.Sprintf("sentinel-hub-%d", time.Now().UnixNano())
	pool := e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	const n = 10
	const ttl = 30 * time.Second // a missed wake-up would show as a wait of a TTL
	clients := make([]*sentinel.Client, n)
	for i := range clients {
		clients[i] = e.clientOn(pool, &sentinel.Config{DefaultTTL: ttl})
	}
	holder := e.client(&sentinel.Config{DefaultTTL: ttl})
	held := make([]*sentinel.Lease, n)
	for i := range held {
		l, err := holder.Lease(ctx, fmt.Sprintf("hub-%d", i))
		require.NoError(t, err)
		held[i] = l
	}
	got := make(chan time.Duration, n)
	var released [n]time.Time
	var rmu sync.Mutex
	for i, c := range clients {
		go func() {
			l, err := c.Lease(ctx, fmt.Sprintf("hub-%d", i), sentinel.WithWait())
			if err != nil {
				t.Error(err)
				got <- -1
				return
			}
			rmu.Lock()
			d := time.Since(released[i])
			rmu.Unlock()
			got <- d
			_ = l.Release(ctx)
		}()
	}
	waitFor(t, 30*time.Second, "every waiter counted in", func() bool {
		return e.count("leases", "key LIKE 'hub-%' AND waiters > 0") == n
	})
	conns := backends(t, app)
	t.Logf("%d clients with a waiter each on one pool: %d server connections", n, conns)
	require.LessOrEqual(t, conns, 4+1)
	for i, l := range held {
		rmu.Lock()
		released[i] = time.Now()
		rmu.Unlock()
		require.NoError(t, l.Release(ctx))
	}
	for range n {
		d := <-got
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, ttl/2, "a waiter slept until the holder's expiry: its wake-up was lost")
	}
}

// Issue 30: a release hands the lease to the oldest registered waiter.
// One that died after registering is handed the lease all the same (its
// registration is still live): that grant expires within the dead
// waiter's TTL, on the database clock, and the live waiter behind it gets
// the key then, with a larger token; nobody holds it twice.
func TestLeaseGrantToDeadWaiterExpiresWithinItsTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 2 * time.Second
	holderC := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	live := e.client(&sentinel.Config{DefaultTTL: ttl})
	held, err := holderC.Lease(ctx, "dead-waiter")
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=leasewait", "SENTINEL_CHILD_DB="+dbURL,
		"SENTINEL_CHILD_SCHEMA="+e.schema, "SENTINEL_CHILD_KEY=dead-waiter", "SENTINEL_CHILD_TTL="+ttl.String())
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 20*time.Second, "the child to register", func() bool {
		return e.count("lease_waiters", "key = 'dead-waiter'") == 1
	})
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := live.Lease(ctx, "dead-waiter", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 20*time.Second, "the live waiter to register behind it", func() bool {
		return e.count("lease_waiters", "key = 'dead-waiter'") == 2
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	require.Equal(t, 1, e.count("leases", "key = 'dead-waiter' AND granted_waiter IS NOT NULL AND expires_at > now()"),
		"the release handed the lease to the oldest registration (the dead child)")
	l := <-got
	require.NotNil(t, l)
	took := time.Since(released)
	t.Logf("the live waiter got the key %s after the release to a dead waiter (TTL %s)", took, ttl)
	require.Less(t, took, 2*ttl+time.Second, "within about the dead waiter's TTL")
	require.Greater(t, l.Token(), held.Token())
	require.NoError(t, l.Release(ctx))
}

// Issue 30: waiters on one key, all registered, are handed the lease in
// turn by each release: tokens only grow, no two hold at once, and every
// registration and count is gone at the end.
func TestLeaseReleaseHandsOverToWaiters(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const n = 6
	var (
		mu      sync.Mutex
		inside  int
		overlap bool
		tokens  []int64
		wg      sync.WaitGroup
	)
	first, err := e.client(nil).Lease(ctx, "handed")
	require.NoError(t, err)
	for range n {
		c := e.client(&sentinel.Config{DefaultTTL: time.Minute})
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lease(ctx, "handed", sentinel.WithWait())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inside++
			overlap = overlap || inside > 1
			tokens = append(tokens, l.Token())
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			inside--
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	waitFor(t, 20*time.Second, "every waiter registered", func() bool {
		return e.count("lease_waiters", "key = 'handed'") == n
	})
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	require.False(t, overlap, "two holders at once")
	require.Len(t, tokens, n)
	require.True(t, slices.IsSorted(tokens), "tokens only grow: %v", tokens)
	require.Greater(t, tokens[0], first.Token())
	require.Equal(t, 0, e.count("lease_waiters", "key = 'handed'"), "every registration was granted or withdrawn")
	require.Equal(t, 0, e.count("leases", "key = 'handed' AND waiters <> 0"), "every waiter counted out")
}

// A release while the holder's guarded transaction (VerifyToken, FOR KEY
// SHARE) is open and a caller waits: the release ends the lease without
// handing it over (no grant may commit under an open guard), the waiter
// is not granted while the guard is open, and takes the key once it
// commits. A release that nobody waits for ends the lease and leaves no
// registration behind; a release with a stale token changes nothing.
func TestReleaseUnderAnOpenGuardHandsNothingOver(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	b := e.client(&sentinel.Config{DefaultTTL: time.Minute})

	alone, err := a.Lease(ctx, "alone")
	require.NoError(t, err)
	require.NoError(t, alone.Release(ctx))
	require.Equal(t, 1, e.count("leases", "key = 'alone' AND expires_at <= pg_catalog.clock_timestamp() AND waiters = 0"))
	require.ErrorIs(t, a.ReleaseHandle(ctx, alone.Handle()), sentinel.ErrStaleToken, "a second release of the same grant")

	l, err := a.Lease(ctx, "guarded")
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l2, err := b.Lease(ctx, "guarded", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	waitFor(t, 10*time.Second, "the waiter registered", func() bool {
		return e.count("lease_waiters", "key = 'guarded'") == 1
	})
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.NoError(t, a.VerifyToken(ctx, tx, "guarded", l.Token()))

	start := time.Now()
	require.NoError(t, l.Release(ctx), "the release ends the lease under the guard")
	require.Less(t, time.Since(start), 2*time.Second, "the release must not wait for the guard")
	require.Equal(t, 1, e.count("leases", "key = 'guarded' AND owner = $1 AND token = $2 AND granted_waiter IS NULL"+
		" AND expires_at <= pg_catalog.clock_timestamp()", a.Owner(), l.Token()), "ended, and no grant under an open guard")
	select {
	case l2 := <-got:
		t.Fatalf("the waiter was granted (token %d) while the holder's guard was open", l2.Token())
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case l2 := <-got:
		require.NotNil(t, l2)
		require.Greater(t, l2.Token(), l.Token())
		require.NoError(t, l2.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never took the key after the guard committed")
	}
}

// A waiter's registration commits without waiting for its WAL flush, so a
// crash of the server can lose it (and its count in leases.waiters) while
// the waiter lives on. Its next renewal finds it gone and, no grant to it
// being readable, the waiter registers again: it used to keep the lost
// registration's id, re-check, renew it and find it gone again, three
// statements in a loop with no sleep for as long as the key stayed held
// (and with no place in line).
func TestLeaseWaiterRegistersAgainAfterItsRegistrationWasLost(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// The holder on an untraced pool: e.stmts counts only the waiter.
	holderC := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = nil }), &sentinel.Config{DefaultTTL: time.Minute})
	held, err := holderC.Lease(ctx, "lost-registration")
	require.NoError(t, err)
	const ttl = 900 * time.Millisecond // the registration is renewed 300 ms after it was made
	waiterC := e.client(&sentinel.Config{DefaultTTL: ttl})
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := waiterC.Lease(ctx, "lost-registration", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'lost-registration'") == 1
	})
	// What a crash of the server does to a registration whose commit had
	// not reached the disk: the row and its count are gone.
	_, err = admin.Exec(ctx, "WITH d AS (DELETE FROM "+e.table("lease_waiters")+" WHERE key = 'lost-registration' RETURNING 1) "+
		"UPDATE "+e.table("leases")+" SET waiters = 0 WHERE key = 'lost-registration'")
	require.NoError(t, err)
	e.stmts.n.Store(0)
	time.Sleep(2 * time.Second)
	stmts := e.stmts.n.Load()
	regs := e.count("lease_waiters", "key = 'lost-registration'")
	t.Logf("in the 2 s after its registration was lost, the waiter sent %d statements; registrations: %d", stmts, regs)
	require.Equal(t, 1, regs, "the waiter registers again")
	require.Less(t, stmts, int64(30), "the waiter spins")
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case l := <-got:
		require.NotNil(t, l)
		require.Less(t, time.Since(released), ttl/2, "handed over by the release")
		require.Greater(t, l.Token(), held.Token())
		require.NoError(t, l.Release(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never got the lease")
	}
}

// A waiter whose grant's wake-up was lost (the releasing process killed
// between its commit and the wake-up) finds the grant at its
// registration's next renewal, up to two thirds of its TTL later, with as
// little as a third of the TTL left. The lease it returns must be renewed
// before its local deadline: the first renewal used to be scheduled a
// full renewal interval after the read, past that deadline, and the lease
// was lost without a renewal ever being tried.
func TestLeaseReadLateIsRenewedBeforeItsDeadline(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holderC := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	sentinel.DropWakes(holderC)
	held, err := holderC.Lease(ctx, "read-late")
	require.NoError(t, err)
	const ttl = 1500 * time.Millisecond // renewed every 500 ms, margin 150 ms
	waiterC := e.client(&sentinel.Config{DefaultTTL: ttl})
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := waiterC.Lease(ctx, "read-late", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'read-late'") == 1
	})
	require.NoError(t, held.Release(ctx)) // granted to the waiter; no wake-up
	var l *sentinel.Lease
	select {
	case l = <-got:
		require.NotNil(t, l)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never found its grant")
	}
	t.Logf("the waiter holds the lease; local deadline in %s", time.Until(l.Deadline()))
	time.Sleep(2 * ttl)
	require.NoError(t, l.Err(), "the lease was lost before its first renewal")
	require.NoError(t, l.Release(ctx))
}
