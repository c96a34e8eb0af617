package sentinel_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An adoption whose TTL's safety margin is longer than the time left
// before the lease's hard expiry would make a Lease that is past its
// deadline as it is returned: it ended at once, reported to
// Observer.LeaseLost (a loss of a lease nobody could have used), while
// the row stayed held, by this client's name and by nobody, until the
// hard expiry. AdoptHandle refuses it (ErrHardTTL) and gives the grant
// back: the key is free.
func TestAdoptHandleTooCloseToTheHardTTLIsGivenBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, worker := e.client(nil), e.client(w.config())
	h := detached(t, dispatcher, "job", sentinel.WithTTL(3*time.Second), sentinel.WithHardTTL(3*time.Second))
	// Its margin, a tenth of an hour, is far past the 3s left.
	l, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(time.Hour))
	if err == nil {
		t.Logf("adopted: Err %v, deadline in %s", l.Err(), time.Until(l.Deadline()))
		holder, herr := worker.Holder(ctx, "job")
		if herr == nil {
			t.Logf("the row is held by %s (token %d) until %s", holder.Owner, holder.Token, time.Until(holder.ExpiresAt))
		}
	}
	require.Error(t, err, "a lease past its deadline as it is returned")
	t.Log(err)
	require.Nil(t, l)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.False(t, errors.Is(err, sentinel.ErrStaleToken), "the handle was current: %v", err)
	_, err = worker.Holder(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was given back: the key is free")
	w.requireNoLoss(t)
}

// The dispatcher's renewal is in flight (waiting on the table) when it
// detaches, and the worker's adoption commits before that renewal runs:
// the renewal, guarded by the dispatcher's owner and token, touches
// nothing of the adopted row, and the dispatcher reports no loss and logs
// no warning.
func TestAdoptHandleBeforeTheDispatchersRenewalInFlight(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	var beats atomic.Int32
	cfg := w.config()
	cfg.Observer.Heartbeat = func(sentinel.HeartbeatEvent) { beats.Add(1) }
	dispatcher := e.client(cfg)
	worker := e.client(&sentinel.Config{Owner: "worker", Host: "worker-host", PID: 202})
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(3*time.Second)) // renewed every second
	require.NoError(t, err)

	tx := holdRenewalOnLeasesLock(t, ctx, e)

	h, err := l.Detach()
	require.NoError(t, err)
	// The worker's adoption (its statement, as AdoptHandle sends it)
	// commits before the renewal runs; a long TTL tells its expiry apart.
	var adopted bool
	var busy bool
	var token int64
	var acquiredAt, expiresAt time.Time
	var hard *time.Time
	var remaining time.Duration
	require.NoError(t, tx.QueryRow(ctx, sentinel.AdoptSQL(worker), h.Namespace, h.Key, h.Owner, h.Token, "worker", "worker-host", 202,
		time.Hour.Microseconds()).Scan(&adopted, &busy, &token, &acquiredAt, &expiresAt, &hard, &remaining))
	require.True(t, adopted)
	require.NoError(t, tx.Commit(ctx))
	before := leaseRow(t, e, "job")
	require.Eventually(t, func() bool { return beats.Load() >= 1 }, 10*time.Second, 5*time.Millisecond, "the renewal in flight lands")
	time.Sleep(100 * time.Millisecond) // its results are read after the Observer's Heartbeat
	require.Equal(t, before, leaseRow(t, e, "job"), "the dispatcher's renewal touched the adopted row")
	holder, err := worker.Holder(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, "worker", holder.Owner)
	require.Equal(t, token, holder.Token)
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	w.requireNoLoss(t)
	require.NoError(t, worker.ReleaseHandle(ctx, sentinel.LeaseHandle{Namespace: h.Namespace, Key: h.Key, Owner: "worker", Token: token}))
}

// AdoptHandle racing the row's expiry on the database clock against a
// third client's takeover, over and over: at most one of them gets the
// key, and when the adoption wins the takeover is refused until the
// worker's lease ends.
func TestAdoptHandleRacesTheExpiry(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker, third := e.client(nil), e.client(nil), e.client(nil)
	wins := map[string]int{}
	for i := range 30 {
		key := fmt.Sprintf("race-%d", i)
		// A long TTL, then the expiry brought near by hand: with MinTTL,
		// on a loaded machine, the lease's deadline passed before Detach,
		// or a renewal in flight at Detach moved the row's expiry past
		// ExpiresAt (a renewal is sent every 33 ms).
		l, err := dispatcher.Lease(ctx, key, sentinel.WithTTL(time.Minute))
		require.NoError(t, err)
		h, err := l.Detach()
		require.NoError(t, err)
		holder, err := dispatcher.Holder(ctx, key)
		require.NoError(t, err)
		require.Equal(t, l.ExpiresAt(), holder.ExpiresAt)
		var exp time.Time
		require.NoError(t, admin.QueryRow(ctx, "UPDATE "+e.table("leases")+
			" SET expires_at = pg_catalog.clock_timestamp() + interval '100 ms' WHERE key = $1 RETURNING expires_at", key).Scan(&exp))
		// The row as it stands, read whatever the time: under load more
		// than 100 ms may pass before this read, and Holder would then
		// say the key is free (the race below is then run past the
		// expiry, which it covers too).
		var rowExp time.Time
		require.NoError(t, admin.QueryRow(ctx, "SELECT expires_at FROM "+e.table("leases")+" WHERE key = $1", key).Scan(&rowExp))
		require.Equal(t, exp, rowExp, "nothing renewed the detached lease")
		// Aim both at the expiry: sleep until a few ms around it by the
		// database's own reading of the time left.
		var left time.Duration
		require.NoError(t, admin.QueryRow(ctx, "SELECT $1::timestamptz - pg_catalog.clock_timestamp()", exp).Scan(&left))
		time.Sleep(left - time.Duration(i%10)*4*time.Millisecond)
		var wg sync.WaitGroup
		var a *sentinel.Lease
		var b *sentinel.Lease
		var aerr, berr error
		wg.Add(2)
		go func() { defer wg.Done(); a, aerr = worker.AdoptHandle(ctx, h, sentinel.WithTTL(5*time.Second)) }()
		go func() { defer wg.Done(); b, berr = third.Lease(ctx, key, sentinel.WithTTL(5*time.Second)) }()
		wg.Wait()
		switch {
		case aerr == nil && berr == nil:
			t.Fatalf("round %d: both hold the key: adopted token %d, taken over token %d", i, a.Token(), b.Token())
		case aerr == nil:
			wins["adopt"]++
			require.ErrorIs(t, berr, sentinel.ErrNotAcquired, "round %d", i)
			require.NoError(t, a.Release(ctx))
		case berr == nil:
			wins["takeover"]++
			require.ErrorIs(t, aerr, sentinel.ErrStaleToken, "round %d", i)
			require.NoError(t, b.Release(ctx))
		default:
			wins["neither"]++
			require.ErrorIs(t, aerr, sentinel.ErrStaleToken, "round %d", i)
			require.ErrorIs(t, berr, sentinel.ErrNotAcquired, "round %d", i)
		}
	}
	t.Logf("outcomes: %v", wins)
}

// A lease the dispatcher was handed by a release (WithWait) is handed on
// and adopted as one it acquired is, and the waiter behind it still gets
// the key at the worker's release.
func TestDetachAHandedOverLeaseAndAdoptIt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	first, dispatcher, worker, next := e.client(nil), e.client(w.config()), e.client(nil), e.client(nil)
	held, err := first.Lease(ctx, "job", sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := dispatcher.Lease(ctx, "job", sentinel.WithWait(), sentinel.WithTTL(3*time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitFor(t, 20*time.Second, "the dispatcher to wait", func() bool { return e.count("lease_waiters", "key = 'job'") == 1 })
	require.NoError(t, held.Release(ctx))
	var l *sentinel.Lease
	select {
	case l = <-got:
		require.NotNil(t, l)
	case <-time.After(20 * time.Second):
		t.Fatal("not handed over")
	}
	nextGot := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := next.Lease(ctx, "job", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		nextGot <- l
	}()
	waitFor(t, 20*time.Second, "the next waiter to wait", func() bool { return e.count("lease_waiters", "key = 'job'") == 1 })
	h, err := l.Detach()
	require.NoError(t, err)
	a, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(3*time.Second))
	require.NoError(t, err)
	require.Greater(t, a.Token(), h.Token)
	time.Sleep(4 * time.Second) // past the dispatcher's TTL: the worker's heartbeat holds it
	require.NoError(t, a.Err())
	select {
	case n := <-nextGot:
		t.Fatalf("the next waiter got the key (token %d) while the worker holds it", n.Token())
	default:
	}
	require.NoError(t, a.Release(ctx))
	select {
	case n := <-nextGot:
		require.NotNil(t, n)
		require.Greater(t, n.Token(), a.Token())
		require.NoError(t, n.Release(ctx))
	case <-time.After(20 * time.Second):
		t.Fatal("the worker's release did not hand the key on")
	}
	w.requireNoLoss(t)
}

// Detach concurrent with Heartbeat called by the user, over and over:
// Heartbeat returns nil (it renewed before Detach) or ErrDetached, never
// a loss, and nothing is reported as one.
func TestDetachRacesHeartbeat(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, worker := e.client(w.config()), e.client(nil)
	outcomes := map[string]int{}
	for i := range 40 {
		key := fmt.Sprintf("hb-%d", i)
		l, err := dispatcher.Lease(ctx, key, sentinel.WithTTL(5*time.Second))
		require.NoError(t, err)
		var wg sync.WaitGroup
		var herr, derr error
		var h sentinel.LeaseHandle
		wg.Add(2)
		go func() { defer wg.Done(); herr = l.Heartbeat(ctx) }()
		go func() { defer wg.Done(); h, derr = l.Detach() }()
		wg.Wait()
		require.NoError(t, derr, "round %d", i)
		if herr == nil {
			outcomes["renewed"]++
		} else {
			outcomes["detached"]++
			require.ErrorIs(t, herr, sentinel.ErrDetached, "round %d", i)
		}
		require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
		a, err := worker.AdoptHandle(ctx, h)
		require.NoError(t, err, "round %d", i)
		require.NoError(t, a.Release(ctx))
	}
	t.Logf("outcomes: %v", outcomes)
	w.requireNoLoss(t)
}
