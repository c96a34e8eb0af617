package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A holder frozen past its lease's deadline (SIGSTOP, a paused VM) whose
// row expired meanwhile and was granted to another client resumes and
// renews by hand, its deadline timer not fired yet (or firing while the
// renewal is in flight, which takes the lease out of the heartbeater).
// Heartbeat returned nil, "renewed", though the renewal found the row
// another holder's: the renewal skipped a lease the heartbeater no longer
// held as "being released", and Heartbeat did not check the deadline as
// Err does. A loop that heartbeats before each step took the next step
// while another client held the key.
func TestHeartbeatAfterTheDeadlinePassedReportsTheLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	other := e.client(nil)
	l, err := c.Lease(ctx, "press")
	require.NoError(t, err)
	sentinel.StallLease(l)
	_, err = admin.Exec(ctx, "UPDATE "+e.table("leases")+" SET expires_at = now() - interval '1 ms' WHERE key = 'press'")
	require.NoError(t, err)
	l2, err := other.Lease(ctx, "press")
	require.NoError(t, err, "the row expired: another client takes the key")
	defer l2.Release(ctx)

	err = l.Heartbeat(ctx)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "Heartbeat of a lease past its deadline, the key held by another")
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done still open after Heartbeat")
	}
}

// Client.Close while Do's fn runs: Close ends the lease and frees its key
// while fn may still be working (it cancels fn's ctx at the same moment),
// so another client can be granted the key before fn stopped, as after a
// loss. Do returned fn's error alone: context.Canceled for a fn that
// honours its ctx, as if the caller's own ctx had been cancelled, and nil
// for one that finished its step regardless; the job loop could not tell
// that its work was cut short by Close and may have overlapped the next
// holder. Do now says so: its error matches ErrLeaseLost and ErrClosed,
// as a Once's does when Close ends its execution lease.
func TestDoCutShortByCloseReportsIt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	for _, honours := range []bool{true, false} {
		c := e.client(nil)
		started := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- c.Do(ctx, "nightly", func(ctx context.Context, l *sentinel.Lease) error {
				close(started)
				<-ctx.Done()
				if honours {
					return ctx.Err()
				}
				return nil // finishes its step, ignoring the cancellation
			})
		}()
		<-started
		c.Close()
		err := <-done
		require.ErrorIs(t, err, sentinel.ErrClosed, "fn honours its ctx: %v", honours)
		require.ErrorIs(t, err, sentinel.ErrLeaseLost, "fn honours its ctx: %v", honours)
		if honours {
			require.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
		}
	}

	// A Do that ended before Close reports nothing of it; nor does one
	// whose fn released the lease itself.
	c := e.client(nil)
	require.NoError(t, c.Do(ctx, "nightly", func(context.Context, *sentinel.Lease) error { return nil }))
	require.NoError(t, c.Do(ctx, "nightly", func(ctx context.Context, l *sentinel.Lease) error { return l.Release(ctx) }))
	c.Close()
}

// Lease.Context of a lease that has ended, or whose deadline has passed
// (a frozen process that just resumed, its timer not fired yet), returned
// a ctx that was not cancelled: a goroutine cancelled it later (after the
// ended lease's Done, at once but asynchronously), or never (until the
// deadline timer fired). A loop that derives its work's ctx from the
// lease and checks it before each step took one step on a lease it no
// longer held. The ctx is now cancelled before Context returns, its cause
// the lease's Err.
func TestLeaseContextOfAnEndedLeaseIsCancelledAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})

	l, err := c.Lease(ctx, "press")
	require.NoError(t, err)
	sentinel.StallLease(l)
	work, cancel := l.Context(ctx)
	defer cancel()
	require.Error(t, work.Err(), "the ctx of a lease past its deadline")
	require.ErrorIs(t, context.Cause(work), sentinel.ErrLeaseLost)
	require.ErrorIs(t, l.Release(ctx), sentinel.ErrLeaseLost)

	for range 20 {
		l, err := c.Lease(ctx, "press")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		work, cancel := l.Context(ctx)
		require.Error(t, work.Err(), "the ctx of a released lease")
		require.ErrorIs(t, context.Cause(work), sentinel.ErrReleased)
		cancel()
	}
}

// A Release whose statement committed but whose reply was lost (the
// connection black-holed after the release was sent) fails and ends the
// lease; the holder calls Release again, as its godoc invites. The retry
// found the row already freed and returned the failed attempt's error, a
// LostError matching ErrLeaseLost ("the work may have overlapped another
// holder"), although the row still carried the lease's token: its own
// release had freed it, and nobody else had held the key. It now reads
// the row and returns nil when it still carries the lease's token.
func TestReleaseRetriedAfterALostReplyIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond})
	l, err := c.Lease(ctx, "reply-lost")
	require.NoError(t, err)
	px.armAfter("lease_release_to")
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, l.Release(rctx), "the release's reply is lost")
	require.True(t, px.frozen(), "the release's reply was not cut")
	require.Zero(t, e.count("leases", "key = 'reply-lost' AND expires_at > now()"), "the release committed")

	require.NoError(t, l.Release(ctx), "Release again: the row carries the lease's token, freed by the first attempt")
	require.NoError(t, l.Release(ctx), "and once more")
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased, "released (by the first attempt): Err says so")

	// A row another holder took meanwhile is still reported.
	l, err = c.Lease(ctx, "taken")
	require.NoError(t, err)
	px.armAfter("lease_release_to")
	rctx, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, l.Release(rctx))
	require.True(t, px.frozen())
	l2, err := e.client(nil).Lease(ctx, "taken")
	require.NoError(t, err)
	defer l2.Release(ctx)
	require.ErrorIs(t, l.Release(ctx), sentinel.ErrLeaseLost, "the key is another holder's now")
}

// Client.Close while a lease waiter rides out an unreachable database
// (its attempt failed, it sleeps until its next one, WaitRecheck later):
// Close wakes its waits and waits for them to withdraw, but that sleep
// did not listen for the wake-up, so Close blocked for ReleaseTimeout
// (or until the sleep ended), and the wait returned only then. The sleep
// now wakes on the waiter's wake-ups too: Close returns at once, the
// wait with ErrClosed (and a wake-up by a reconnected listener retries
// at once, rather than after the rest of WaitRecheck).
func TestCloseEndsAWaitRidingOutAnOutageAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: time.Second})
	l, err := holder.Lease(ctx, "outage")
	require.NoError(t, err)
	defer l.Release(ctx)
	var blocked atomic.Bool
	p := e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = "outage-waiter-" + e.schema
		c.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
			if blocked.Load() {
				return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("network down (test)")}
			}
			return nil
		}
	})
	w := e.clientOn(p, &sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: 20 * time.Second, ReleaseTimeout: 10 * time.Second,
		DisableListen: true})
	done := make(chan error, 1)
	go func() {
		_, err := w.Lease(ctx, "outage", sentinel.WithWait())
		done <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'outage'") == 1
	})
	blocked.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "outage-waiter-"+e.schema)
	require.NoError(t, err)
	// The waiter re-checks at the holder's expiry (a second at most), and
	// its attempt fails: it sleeps WaitRecheck.
	time.Sleep(2500 * time.Millisecond)
	start := time.Now()
	w.Close()
	took := time.Since(start)
	require.Less(t, took, 3*time.Second, "Close waited for the wait's outage sleep")
	select {
	case err := <-done:
		require.ErrorIs(t, err, sentinel.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("the wait did not end with Close")
	}
}

// Client.Close ends its leases as released, then frees their rows in one
// statement. When that statement failed (here it waited for a row lock
// past ReleaseTimeout) or its reply was lost, Err reads as lost ("client
// closed"), as documented; but the holder's own Release afterwards (a
// deferred one, at shutdown) returned that error, matching ErrLeaseLost,
// although nobody else had held the key: it freed the row still carrying
// the lease's token, or found it freed by Close's statement. A turn's
// Release does return nil there. The lease's Release now does too, and
// Err then says released.
func TestReleaseAfterAFailedCloseReleaseIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 300 * time.Millisecond})
	l, err := c.Lease(ctx, "closing")
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'closing' FOR SHARE")
	require.NoError(t, err)
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
	c.Close()
	require.ErrorIs(t, l.Err(), sentinel.ErrLeaseLost, "Close's release did not free the row")
	// The abandoned statement may still wait on the server: end it
	// without committing (as a server-side timeout would), so that the
	// row is still held.
	var waiter int32
	if admin.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&waiter) == nil {
		terminateAbandoned(t, waiter)
	}
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, e.count("leases", "key = 'closing' AND expires_at > now()"), "the row is still held")

	require.NoError(t, l.Release(ctx), "Release frees the row, which still carries the lease's token")
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	require.NoError(t, l.Release(ctx), "and once more")
	l2, err := e.client(nil).Lease(ctx, "closing")
	require.NoError(t, err, "the key is free")
	require.NoError(t, l2.Release(ctx))

	// Close's statement committed, its reply lost.
	px := newFreezeProxy(t, dbURL)
	c = e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond})
	l, err = c.Lease(ctx, "closing")
	require.NoError(t, err)
	px.armAfter("AS v(ns, key, token)") // sqlReleaseMany
	c.Close()
	require.True(t, px.frozen(), "Close's release's reply was not cut")
	require.Zero(t, e.count("leases", "key = 'closing' AND expires_at > now()"), "Close's release committed")
	require.NoError(t, l.Release(ctx), "Release finds the row freed still carrying the lease's token")
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
}

// Do released the lease after fn with a context stripped of ctx's
// cancellation and deadline (context.WithoutCancel) and no bound of its
// own: a release that could not finish (the lease row locked by a hung
// transaction, a black-holed connection) kept Do from returning, however
// short ctx's deadline, although fn was done and ReleaseTimeout bounds
// every other give-back after the work (Once's, Close's, a Release with a
// done ctx). Do's release is bounded by ReleaseTimeout now: Do returns,
// reporting the failed release (fn succeeded), and the row expires within
// its TTL.
func TestDoReleaseIsBoundedByReleaseTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 300 * time.Millisecond})
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- c.Do(ctx, "locked-at-release", func(ctx context.Context, l *sentinel.Lease) error {
			// A transaction left open holds the lease row: the release
			// after fn waits for it.
			_, err := tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'locked-at-release' FOR SHARE")
			return err
		})
	}()
	select {
	case err := <-done:
		require.Error(t, err, "the release failed, fn succeeded: Do says so")
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(10 * time.Second):
		_ = tx.Rollback(ctx) // lets Do return before the test ends
		<-done
		t.Fatal("Do did not return while its release waited for a locked row")
	}
}

// A Release that waits for its statement (here for a row lock) while the
// lease's local deadline passes: the deadline timer ended the lease as
// lost (Done closed), then the statement freed the row, still live and
// carrying the lease's token, and Release returned nil, but Err kept
// saying lost, matching ErrLeaseLost. The holder had called Release
// before its deadline, and nobody else could hold the key before the
// release freed it: Err now says released, as Release does. (A deadline
// that passed before Release was called is still a loss: the holder may
// have worked past it.) Release stops the renewals first: the deadline
// passes at most 2.1s later, the row's expiry 0.9s after that.
func TestReleaseThatOutlivesTheDeadlineSaysReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 3 * time.Second, SafetyMargin: 900 * time.Millisecond})
	check := func(name string, release func(context.Context) error, done <-chan struct{}, errf func() error, lockRow string) {
		t.Helper()
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, lockRow)
		require.NoError(t, err)
		released := make(chan error, 1)
		go func() { released <- release(ctx) }()
		select {
		case <-done: // the deadline passed while Release waits
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the deadline did not end it", name)
		}
		require.ErrorIs(t, errf(), sentinel.ErrLeaseLost, "%s: ended by its deadline", name)
		require.NoError(t, tx.Commit(ctx), "%s: the row still live (3s TTL, deadline at 2.1s)", name)
		require.NoError(t, <-released, "%s: Release freed the live row", name)
		require.ErrorIs(t, errf(), sentinel.ErrReleased, "%s: Err says what Release said", name)
		require.NotErrorIs(t, errf(), sentinel.ErrLeaseLost, name)
	}
	l, err := c.Lease(ctx, "slow-release")
	require.NoError(t, err)
	check("Lease", l.Release, l.Done(), l.Err, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'slow-release' FOR SHARE")

	tn, err := c.Turn(ctx, "slow-release")
	require.NoError(t, err)
	check("Turn", tn.Release, tn.Done(), tn.Err, "SELECT 1 FROM "+e.table("tickets")+" WHERE resource = 'slow-release' FOR KEY SHARE")
}

// A Lease whose ctx ended while its grant was in flight gives the grant
// back and returns ctx's error, "(granted as it ended: released)". When
// that give-back failed (here its statement never reached the server),
// the error said "released" all the same, though the key stayed held, by
// nobody, until the row expired: an operator reading it looked for
// another holder. The error now says the give-back failed and that the key
// is free within the TTL.
func TestGrantAsCtxEndsWhoseGiveBackFailedSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	tr := &hookTracer{match: "INSERT INTO"}
	c := e.proxiedClient(px, tr, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 300 * time.Millisecond})
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() {
		px.arm("lease_release_to") // the give-back never reaches the server
		cancel()
	}
	tr.hook.Store(&f)
	l, err := c.Lease(lctx, "granted-as-it-ended")
	require.Nil(t, l)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, px.frozen(), "the give-back was not sent")
	require.Equal(t, 1, e.count("leases", "key = 'granted-as-it-ended' AND expires_at > now()"), "the key is still held")
	require.NotContains(t, err.Error(), ": released)", "the error said released")
	require.ErrorContains(t, err, "giving it back failed")
}

// A Release in flight while the lease's (or turn's) local deadline passes
// ends released when its statement frees the still-live row: Err then
// says ErrReleased (TestReleaseThatOutlivesTheDeadlineSaysReleased). But
// the deadline timer had already reported the end to the Observer as a
// loss (LeaseLost, and a warning "lease ended"), so a dashboard counted a
// loss that Err, and Release, denied. The report of an end that comes
// while a Release is in flight now waits for the Release's outcome: no
// loss when it released; the loss, once, when it did not (here its
// statement was cut off: the lease stays lost).
func TestReleaseAcrossTheDeadlineIsNoLossToTheObserver(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var losses atomic.Int32
	var logs lockedBuffer
	c := e.client(&sentinel.Config{DefaultTTL: 3 * time.Second, SafetyMargin: 900 * time.Millisecond,
		Observer: &sentinel.Observer{LeaseLost: func(sentinel.LeaseLoss) { losses.Add(1) }},
		Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
	check := func(name string, release func(context.Context) error, done <-chan struct{}, errf func() error, lockRow string, commit bool) {
		t.Helper()
		losses.Store(0)
		mark := len(logs.String())
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		_, err = tx.Exec(ctx, lockRow)
		require.NoError(t, err)
		var holder int32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
		released := make(chan error, 1)
		go func() { released <- release(ctx) }()
		select {
		case <-done: // the deadline passed while Release waits
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the deadline did not end it", name)
		}
		require.ErrorIs(t, errf(), sentinel.ErrLeaseLost, "%s: ended by its deadline", name)
		if commit {
			require.NoError(t, tx.Commit(ctx), "%s: the row still live (3s TTL, deadline at 2.1s)", name)
			require.NoError(t, <-released, "%s: Release freed the live row", name)
			require.ErrorIs(t, errf(), sentinel.ErrReleased, name)
			require.Zero(t, losses.Load(), "%s: the Observer was told of a loss Err does not report", name)
			require.NotContains(t, logs.String()[mark:], "lease ended", name)
			return
		}
		var waiter int32
		require.Eventually(t, func() bool {
			return admin.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&waiter) == nil
		}, 10*time.Second, 5*time.Millisecond)
		terminateAbandoned(t, waiter)
		require.Error(t, <-released, "%s: the release statement was cut off", name)
		require.NoError(t, tx.Rollback(ctx))
		require.ErrorIs(t, errf(), sentinel.ErrLeaseLost, name)
		require.Equal(t, int32(1), losses.Load(), "%s: the loss Err reports is reported once", name)
	}
	for _, commit := range []bool{true, false} {
		l, err := c.Lease(ctx, "slow-release")
		require.NoError(t, err)
		check("Lease", l.Release, l.Done(), l.Err, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'slow-release' FOR SHARE", commit)
		_, _ = admin.Exec(ctx, "DELETE FROM "+e.table("leases"))

		tn, err := c.Turn(ctx, "slow-release")
		require.NoError(t, err)
		check("Turn", tn.Release, tn.Done(), tn.Err, "SELECT 1 FROM "+e.table("tickets")+" WHERE resource = 'slow-release' FOR KEY SHARE", commit)
		_, _ = admin.Exec(ctx, "DELETE FROM "+e.table("tickets"))
	}
}
