package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A lease handed from a dispatcher to a worker (Lease.Detach, then
// RenewHandle and ReleaseHandle in the worker). Two clients on two pools
// stand for the two processes.

// handoffWatch is a dispatcher client's Observer and log: what it reports
// after handing a lease on must not read as a loss.
type handoffWatch struct {
	losses, releaseFailures atomic.Int32
	logs                    lockedBuffer
}

func (w *handoffWatch) config() *sentinel.Config {
	return &sentinel.Config{
		Observer: &sentinel.Observer{
			LeaseLost:     func(sentinel.LeaseLoss) { w.losses.Add(1) },
			ReleaseFailed: func(sentinel.ReleaseFailure) { w.releaseFailures.Add(1) },
		},
		Logger: slog.New(slog.NewTextHandler(&w.logs, nil)),
	}
}

func (w *handoffWatch) requireNoLoss(t *testing.T) {
	t.Helper()
	require.Zero(t, w.losses.Load(), "Observer.LeaseLost was called")
	require.Zero(t, w.releaseFailures.Load(), "Observer.ReleaseFailed was called")
	require.NotContains(t, w.logs.String(), "level=WARN", "a warning was logged")
}

// The worker dies after the handoff: nothing renews the lease any more,
// so the key frees by its TTL. Before Detach the dispatcher's heartbeat
// went on renewing the row the worker had taken, and the key stayed held
// for as long as the dispatcher lived.
func TestDetachedLeaseExpiresWhenTheWorkerDies(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, worker := e.client(w.config()), e.client(nil)
	const ttl = 600 * time.Millisecond
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(ttl))
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	detached := time.Now()
	require.Equal(t, l.Handle(), h)

	exp, err := worker.RenewHandle(ctx, h, ttl) // the worker takes it up...
	require.NoError(t, err)
	worker.Close() // ...and dies

	require.Eventually(t, func() bool {
		_, err := dispatcher.Holder(ctx, "job")
		return errors.Is(err, sentinel.ErrNotFound)
	}, 10*time.Second, 10*time.Millisecond, "the key must free by its TTL")
	// Freed once the worker's renewal ran out, not renewed since: about
	// 2 TTLs after Detach at most (the dispatcher's own expiry, then the
	// worker's), here with plenty of slack for a loaded machine.
	require.Less(t, time.Since(detached), 5*ttl, "freed %s after Detach", time.Since(detached))
	var now time.Time
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now))
	require.False(t, now.Before(exp), "freed by the worker's expiry %s, not before it", exp)
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	w.requireNoLoss(t)

	next, err := dispatcher.Lease(ctx, "job")
	require.NoError(t, err, "the key is free for the next dispatch")
	require.Greater(t, next.Token(), h.Token)
	require.NoError(t, next.Release(ctx))
}

// The worker releases the lease it was handed: the dispatcher's Lease
// reports no loss. Before Detach the dispatcher's next renewal found the
// row gone and ended its Lease lost (LostError, Observer.LeaseLost, a
// warning), a false alarm.
func TestDetachedLeaseReleasedByTheWorkerIsNoLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	var beats atomic.Int32
	cfg := w.config()
	cfg.Observer.Heartbeat = func(sentinel.HeartbeatEvent) { beats.Add(1) }
	dispatcher, worker := e.client(cfg), e.client(nil)
	const ttl = 300 * time.Millisecond // renewed every 100ms while held
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(ttl))
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	atDetach := beats.Load()

	_, err = worker.RenewHandle(ctx, h, ttl)
	require.NoError(t, err)
	require.NoError(t, worker.ReleaseHandle(ctx, h))
	time.Sleep(4 * ttl) // a dozen renewal intervals of the dispatcher's
	require.LessOrEqual(t, beats.Load(), atDetach+1, "the dispatcher renews nothing after Detach (one renewal may have been in flight)")
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	require.NotErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	w.requireNoLoss(t)
}

// The dispatcher closes (a restart, a deploy) while the worker works on:
// Close leaves the row alone. Before Detach, Close released the row the
// worker held, and its next renewal found the lease gone.
func TestDetachedLeaseSurvivesTheDispatchersClose(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker := e.client(nil), e.client(nil)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	dispatcher.Close()
	_, err = worker.RenewHandle(ctx, h, 5*time.Second)
	require.NoError(t, err, "the worker's lease survives the dispatcher's Close")
	require.NoError(t, worker.ReleaseHandle(ctx, h))
}

// What a detached Lease says and does: it has ended here, handed on,
// neither released nor lost; its row is untouched.
func TestDetachEndsTheLeaseHereOnly(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, other := e.client(w.config()), e.client(nil)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	work, cancel := l.Context(ctx)
	defer cancel()
	expires := l.ExpiresAt()

	h, err := l.Detach()
	require.NoError(t, err)
	require.Equal(t, sentinel.LeaseHandle{Namespace: "default", Key: "job", Owner: dispatcher.Owner(), Token: l.Token()}, h)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done is not closed after Detach")
	}
	<-work.Done()
	require.ErrorIs(t, context.Cause(work), sentinel.ErrDetached, "Context's cause")
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	require.NotErrorIs(t, l.Err(), sentinel.ErrReleased)
	require.NotErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	require.ErrorIs(t, l.Heartbeat(ctx), sentinel.ErrDetached)
	require.Equal(t, expires, l.ExpiresAt(), "the expiry as of the last renewal")

	err = l.Release(ctx)
	require.ErrorIs(t, err, sentinel.ErrDetached, "Release frees nothing after Detach")
	require.Contains(t, err.Error(), "ReleaseHandle")
	holder, err := other.Holder(ctx, "job")
	require.NoError(t, err, "the row is still held")
	require.Equal(t, h.Token, holder.Token)
	require.Equal(t, expires, holder.ExpiresAt, "Detach writes nothing")
	_, err = other.Lease(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	var held *sentinel.HeldError
	_, err = dispatcher.Lease(ctx, "job")
	require.ErrorAs(t, err, &held)
	require.False(t, held.Self, "the dispatcher holds it no more")

	again, err := l.Detach()
	require.NoError(t, err, "Detach twice")
	require.Equal(t, h, again)
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)

	// The dispatcher may still free the key by the handle (the handoff
	// failed), as the worker would.
	require.NoError(t, dispatcher.ReleaseHandle(ctx, h))
	_, err = other.Holder(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound)
	w.requireNoLoss(t)
}

// A lease that ended already is not handed on: Detach returns the zero
// handle and why it ended.
func TestDetachAfterTheLeaseEnded(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)

	released, err := a.Lease(ctx, "released")
	require.NoError(t, err)
	require.NoError(t, released.Release(ctx))
	h, err := released.Detach()
	require.ErrorIs(t, err, sentinel.ErrReleased)
	require.Zero(t, h)
	require.ErrorIs(t, released.Err(), sentinel.ErrReleased)

	lost, err := a.Lease(ctx, "lost", sentinel.WithTTL(300*time.Millisecond))
	require.NoError(t, err)
	taken, err := b.Lease(ctx, "lost", sentinel.WithForce())
	require.NoError(t, err)
	defer taken.Release(ctx)
	select {
	case <-lost.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease taken over did not end")
	}
	h, err = lost.Detach()
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.Zero(t, h)

	closed, err := a.Lease(ctx, "closed")
	require.NoError(t, err)
	a.Close()
	h, err = closed.Detach()
	require.ErrorIs(t, err, sentinel.ErrReleased, "Close released it")
	require.Zero(t, h)
}

// A release statement in flight (its row locked) and a Detach: Detach
// waits for the Release and reports its outcome, rather than hand on a
// row the Release is freeing.
func TestDetachWaitsForAReleaseUnderWay(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	l, err := c.Lease(ctx, "job", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'job' FOR SHARE")
	require.NoError(t, err)
	var locker int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&locker))

	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", locker).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the release statement waits for the row")
	type result struct {
		h   sentinel.LeaseHandle
		err error
	}
	detached := make(chan result, 1)
	go func() { h, err := l.Detach(); detached <- result{h, err} }()
	select {
	case r := <-detached:
		t.Fatalf("Detach returned (%v, %v) while the Release was in flight", r.h, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-released)
	r := <-detached
	require.ErrorIs(t, r.err, sentinel.ErrReleased)
	require.Zero(t, r.h)
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
}

// Detach while a heartbeat renewal of the lease is in flight (the
// statement waits on a table lock), and the worker releases the row
// before that renewal runs: the renewal finds the row gone, which is no
// loss, and Detach did not wait for it.
func TestDetachWithARenewalInFlight(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	var beats atomic.Int32
	cfg := w.config()
	cfg.Observer.Heartbeat = func(sentinel.HeartbeatEvent) { beats.Add(1) }
	dispatcher := e.client(cfg)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(3*time.Second)) // renewed every second
	require.NoError(t, err)

	tx := holdRenewalOnLeasesLock(t, ctx, e)

	start := time.Now()
	h, err := l.Detach()
	require.NoError(t, err)
	require.Less(t, time.Since(start), 100*time.Millisecond, "Detach does not wait for the renewal")
	// The worker's release, as ReleaseHandle would make it, commits
	// before the renewal runs.
	_, err = tx.Exec(ctx, "DELETE FROM "+e.table("leases")+" WHERE key = $1 AND token = $2", h.Key, h.Token)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Eventually(t, func() bool { return beats.Load() >= 1 }, 10*time.Second, 5*time.Millisecond, "the renewal in flight lands")
	time.Sleep(100 * time.Millisecond) // its results are read after the Observer's Heartbeat
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	w.requireNoLoss(t)
}

// Detach racing Release and Close, over and over: each race has one
// outcome, the same for the Lease and for its row. Detach won: the row
// is held (by the handle), Release says ErrDetached. Release or Close
// won: the row is free, Detach says ErrReleased.
func TestDetachRacesReleaseAndClose(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	worker := e.client(nil)
	p := e.pool(nil)
	wins := map[string]int{}
	for i := range 40 {
		closeIt := i%2 == 1
		cfg := w.config()
		c := e.clientOn(p, cfg)
		l, err := c.Lease(ctx, "race", sentinel.WithTTL(5*time.Second))
		require.NoError(t, err)
		var wg sync.WaitGroup
		var h sentinel.LeaseHandle
		var derr, rerr error
		wg.Add(2)
		go func() { defer wg.Done(); h, derr = l.Detach() }()
		go func() {
			defer wg.Done()
			if closeIt {
				c.Close()
			} else {
				rerr = l.Release(ctx)
			}
		}()
		wg.Wait()
		_, herr := worker.Holder(ctx, "race")
		if derr == nil {
			wins["detach"]++
			require.Equal(t, l.Handle(), h)
			require.NoError(t, herr, "round %d: detached, so still held", i)
			require.ErrorIs(t, l.Err(), sentinel.ErrDetached, "round %d", i)
			if !closeIt {
				require.ErrorIs(t, rerr, sentinel.ErrDetached, "round %d", i)
			}
			require.NoError(t, worker.ReleaseHandle(ctx, h), "round %d", i)
		} else {
			wins["release"]++
			require.ErrorIs(t, derr, sentinel.ErrReleased, "round %d", i)
			require.Zero(t, h)
			require.NoError(t, rerr, "round %d", i)
			require.ErrorIs(t, herr, sentinel.ErrNotFound, "round %d: released, so free", i)
			require.ErrorIs(t, l.Err(), sentinel.ErrReleased, "round %d", i)
		}
		c.Close()
	}
	t.Logf("outcomes: %v", wins)
	w.requireNoLoss(t)
}

// Do whose fn hands the lease on: Do neither releases it nor reports a
// loss.
func TestDoWhoseFnDetachesLeavesTheRowToTheReceiver(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var w handoffWatch
	dispatcher, worker := e.client(w.config()), e.client(nil)
	var h sentinel.LeaseHandle
	err := dispatcher.Do(ctx, "job", func(ctx context.Context, l *sentinel.Lease) error {
		var err error
		h, err = l.Detach()
		return err
	})
	require.NoError(t, err)
	_, err = worker.RenewHandle(ctx, h, 5*time.Second)
	require.NoError(t, err, "Do left the row to the worker")
	require.NoError(t, worker.ReleaseHandle(ctx, h))
	w.requireNoLoss(t)
}

// The receiver renews a detached lease with a hard TTL: the database
// never renews it past the hard TTL, whoever renews.
func TestDetachedLeaseKeepsItsHardTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker := e.client(nil), e.client(nil)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(time.Second))
	require.NoError(t, err)
	held, err := worker.Holder(ctx, "job")
	require.NoError(t, err)
	require.False(t, held.HardExpiresAt.IsZero())
	h, err := l.Detach()
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		exp, err := worker.RenewHandle(ctx, h, 300*time.Millisecond)
		if err != nil {
			require.ErrorIs(t, err, sentinel.ErrStaleToken, "expired at its hard TTL")
			break
		}
		require.False(t, exp.After(held.HardExpiresAt), "renewed to %s, past the hard TTL %s", exp, held.HardExpiresAt)
		require.True(t, time.Now().Before(deadline), "renewed for 10s with a 1s hard TTL")
		time.Sleep(50 * time.Millisecond)
	}
	var now time.Time
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now))
	require.False(t, now.Before(held.HardExpiresAt), "refused only at its hard TTL")
}

// holdRenewalOnLeasesLock locks e's leases table in a transaction and
// returns once a statement (the heartbeat's renewal) waits for it: the
// renewal is then in flight until the caller rolls tx back (a deferred
// rollback is registered too).
func holdRenewalOnLeasesLock(t *testing.T, ctx context.Context, e *env) pgx.Tx {
	t.Helper()
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "LOCK TABLE "+e.table("leases")+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	var locker int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&locker))
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", locker).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the renewal waits for the table")
	return tx
}
