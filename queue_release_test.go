package sentinel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// releaseCutOff holds tn's ticket row in a transaction of the test
// (VerifyTurn's lock), starts tn.Release, waits until the leave's backend
// waits for that lock, then ends Release's ctx: the statement is cut off
// in flight, deterministically (no timer races the lock wait). It returns
// a func that ends the test transaction (commit or roll back), the pid of
// the backend that still waits on the server (pgx closed its connection
// and sends a cancel request from a goroutine of its own, which may reach
// the server before or after the lock is free: whether the abandoned
// statement commits is a race the tests settle themselves), and Release's
// error.
func releaseCutOff(t *testing.T, c *sentinel.Client, tn *sentinel.Turn) (func(bool), int32, error) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := c.Pool().Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a failed test must not leave the pool's Close waiting for it
	require.NoError(t, c.VerifyTurn(ctx, tx, tn.Resource(), tn.Ticket()))
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
	end := func(commit bool) {
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	released := make(chan error, 1)
	go func() { released <- tn.Release(rctx) }()
	var waiter int32
	require.Eventually(t, func() bool {
		err := admin.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&waiter)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "the leave never waited for the ticket row")
	cancel()
	select {
	case err = <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not return when its ctx ended")
	}
	return end, waiter, err
}

// terminateAbandoned ends the abandoned statement's backend and waits
// until it is gone: the statement ends without committing. (pgx's cancel
// request may have ended it already, and the backend with it: then
// pg_terminate_backend finds nothing, which is fine.)
func terminateAbandoned(t *testing.T, waiter int32) {
	t.Helper()
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", waiter)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", waiter).Scan(&n) == nil && n == 0
	}, 10*time.Second, 5*time.Millisecond)
}

// A Release whose ctx ended while its statement was in flight (here it
// waited for a lock) returned the ctx's error and marked the ticket as
// given up: a second Release did nothing and returned that error again,
// although the ticket row was still there (the statement, abandoned by
// the client, did not commit). The queue then waited for the ticket's
// expiry. Release now retries it: nil once the retry gives the live
// ticket up.
func TestTurnReleaseCutOffInFlightIsRetried(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)

	end, waiter, err := releaseCutOff(t, c, tn)
	require.ErrorIs(t, err, context.Canceled, "the first Release failed and says so")
	require.ErrorContains(t, err, "call Release again to retry", "and says what to do next")
	require.ErrorContains(t, err, "within its TTL (1m0s)")
	require.ErrorIs(t, tn.Err(), sentinel.ErrLeaseLost, "a failed release ends the turn (as for a Lease)")
	select {
	case <-tn.Done():
	default:
		t.Fatal("Done did not close")
	}
	// The abandoned statement ends without committing (as a server-side
	// timeout or a dropped connection ends it).
	terminateAbandoned(t, waiter)
	end(false)
	require.Equal(t, 1, e.count("tickets", ""), "the ticket row is still there")

	require.NoError(t, tn.Release(ctx), "Release again gives the live ticket up")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased, "released by the retry: Err says so")
	require.Zero(t, e.count("tickets", ""), "the ticket is gone")
	require.Equal(t, 1, e.count("queue_events", "event = 'completed'"))
	require.NoError(t, tn.Release(ctx), "and once more")

	// The next Turn is served at once, not at the ticket's expiry.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := c.Turn(sctx, "printer")
	require.NoError(t, err)
	require.NoError(t, next.Release(ctx))
}

// The same, but the row is gone when Release is called again, with no
// record of the ticket's own leave (as when the ticket expired and was
// removed, or that record was pruned): Release cannot tell that its own
// leave removed the row, keeps reporting the failure (never nil for a
// release it did not see), and the next ticket is served. (An abandoned
// leave that commits after all records its `completed`: see
// TestTurnReleaseRetriedAfterALostReplyIsNil.)
//
// Whether the abandoned statement commits is a race between the test's
// commit and pgx's cancel request (CI lost it under load), so the test
// ends the abandoned statement itself and deletes the row by hand.
func TestTurnReleaseCutOffInFlightThatCommitsLater(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)

	end, waiter, first := releaseCutOff(t, c, tn)
	require.ErrorIs(t, first, context.Canceled)
	terminateAbandoned(t, waiter)
	end(false)
	_, err = admin.Exec(ctx, "DELETE FROM "+e.table("tickets"))
	require.NoError(t, err, "the abandoned leave's commit, made by hand")

	err = tn.Release(ctx)
	require.ErrorIs(t, err, context.Canceled, "Release again reports the first failure")
	require.NotContains(t, err.Error(), "call Release again", "and no longer advises a retry that cannot help")
	require.ErrorIs(t, tn.Err(), sentinel.ErrLeaseLost)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	next, err := c.Turn(sctx, "printer")
	require.NoError(t, err)
	require.NoError(t, next.Release(ctx))
}

// Close gives a held turn back; when that leave failed (here its backend
// was terminated while it waited for a lock), a later Release that gave
// the still-live ticket up returned an error matching ErrLeaseLost
// ("lost: client closed"), which Release's godoc reserves for a turn whose
// ticket expired, although nobody behind could have been served: Release
// after a Close whose leave succeeded returns nil. It now returns nil too.
func TestTurnReleaseAfterAFailedCloseLeaveIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	require.NoError(t, c.VerifyTurn(ctx, tx, "printer", tn.Ticket()))
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))

	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	var waiter int32
	require.Eventually(t, func() bool {
		err := admin.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&waiter)
		return err == nil
	}, 10*time.Second, 5*time.Millisecond, "Close's leave never waited for the ticket row")
	var ok bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", waiter).Scan(&ok))
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	// Close retried the leave, which waited for the lock until Close's
	// deadline cut it off; the server ends it when pgx's cancel request
	// lands, which under load may come after Close returned. Rolled back
	// before that, the lock would let the retry commit.
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, 5*time.Millisecond, "Close's retried leave still waits for the ticket row")
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, e.count("tickets", ""), "Close's leave failed: the ticket row is still there")

	require.NoError(t, tn.Release(ctx), "Release gives the live ticket back")
	require.Zero(t, e.count("tickets", ""))
	require.NoError(t, tn.Release(ctx), "and once more")
}

// A Turn.Release whose leave committed but whose reply was lost (the
// connection black-holed after the leave was sent) fails and ends the
// turn; the holder calls Release again, as its error invites. The retry
// found the ticket row gone and returned the first failure, a LostError
// matching ErrLeaseLost ("someone behind may have been served"), although
// its own leave had given the ticket up while it was live: Lease.Release
// reads the row for that case (sqlLeaseUntaken) and returns nil. The
// retry now reads the ticket's own leave in the queue's history and
// returns nil when that leave gave the live ticket up.
func TestTurnReleaseRetriedAfterALostReplyIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	px.armAfter("WHEN d.alive THEN") // sqlTicketLeave, sent in the leave's one round trip
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	first := tn.Release(rctx)
	require.Error(t, first, "the leave's reply is lost")
	require.True(t, px.frozen(), "the leave's reply was not cut")
	require.Zero(t, e.count("tickets", ""), "the leave committed")
	require.Equal(t, 1, e.count("queue_events", "event = 'completed'"))

	require.NoError(t, tn.Release(ctx), "Release again: the ticket was given up live, by the first attempt")
	require.NoError(t, tn.Release(ctx), "and once more")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased, "released (by the first attempt): Err says so")

	// A ticket that expired and was skipped by the one behind it is
	// still reported: someone behind may have been served.
	tn, err = c.Turn(ctx, "printer", sentinel.WithTTL(time.Second))
	require.NoError(t, err)
	px.arm("WHEN d.alive THEN") // this time the leave never reaches the server
	rctx, cancel = context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, tn.Release(rctx))
	require.True(t, px.frozen())
	require.Equal(t, 1, e.count("tickets", ""), "the leave did not run")
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	next, err := e.client(nil).Turn(sctx, "printer")
	require.NoError(t, err, "served once the ticket ahead expired")
	defer next.Release(ctx)
	require.ErrorIs(t, tn.Release(ctx), sentinel.ErrLeaseLost, "the ticket expired and the one behind was served")

	// The same for Close's give-back: its reply lost, a Release after
	// it said "lost: client closed" (ErrLeaseLost), not nil as after a
	// Close whose give-back it saw.
	tn, err = c.Turn(sctx, "printer-2")
	require.NoError(t, err)
	px.armAfter("WHEN d.alive THEN")
	c.Close()
	require.True(t, px.frozen(), "Close's leave's reply was not cut")
	require.Zero(t, e.count("tickets", "resource = 'printer-2'"), "Close's leave committed")
	require.NoError(t, tn.Release(ctx), "Close gave the live ticket back")
}

// Close gives its tickets back together, at most as many at once as the
// pool has connections; each give-back was bounded by a ReleaseTimeout of
// its own, counted from when it started: with more stuck give-backs than
// connections, Close took ReleaseTimeout once per poolful (here two
// rounds: twice ReleaseTimeout). They now share Close's one bound: a
// give-back that has not finished by then fails, and its ticket goes when
// it expires, within its TTL.
func TestCloseGivesTicketsBackWithinOneReleaseTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const timeout = time.Second
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.MaxConns = 2 }),
		&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: timeout})
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	const n = 4
	for i := range n {
		res := fmt.Sprintf("printer-%d", i)
		tn, err := c.Turn(ctx, res)
		require.NoError(t, err)
		require.NoError(t, c.VerifyTurn(ctx, tx, res, tn.Ticket()), "the test holds the ticket's row: its leave waits")
	}
	start := time.Now()
	c.Close()
	took := time.Since(start)
	require.Less(t, took, timeout+timeout/2, "Close took %s for %d stuck give-backs over 2 connections, ReleaseTimeout %s", took, n, timeout)
}

// Close gives a held turn back as it releases a held lease, but Turn.Err
// said "lost: client closed" (an error matching ErrLeaseLost) after a
// give-back that succeeded, where Lease.Err says ErrReleased: a holder
// reading Err after shutdown was told it lost its turn though nobody
// behind could have been served. Err now says ErrReleased when Close's
// leave gave the live ticket up, and the Observer hears nothing. When the
// leave fails (here it never reaches the server), the turn reads as a
// failed release, as a lease does: an error matching ErrClosed, reported
// once to Observer.ReleaseFailed (it was reported to nobody), and a
// Release that gives the still-live ticket up returns nil and makes Err
// say ErrReleased.
func TestTurnErrAfterCloseSaysReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var losses []sentinel.LeaseLoss
	var failures []sentinel.ReleaseFailure
	obs := &sentinel.Observer{
		LeaseLost: func(l sentinel.LeaseLoss) { mu.Lock(); defer mu.Unlock(); losses = append(losses, l) },
		ReleaseFailed: func(f sentinel.ReleaseFailure) {
			mu.Lock()
			defer mu.Unlock()
			failures = append(failures, f)
		},
	}
	reported := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(losses), len(failures) }

	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, Observer: obs})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	c.Close()
	require.Zero(t, e.count("tickets", ""), "Close gave the ticket back")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased, "Close released the turn")
	require.NotErrorIs(t, tn.Err(), sentinel.ErrLeaseLost, "nothing was lost")
	require.NoError(t, tn.Release(ctx))
	nl, nf := reported()
	require.Zero(t, nl, "no loss")
	require.Zero(t, nf, "no failed release")

	px := newFreezeProxy(t, dbURL)
	c = e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond, Observer: obs})
	tn, err = c.Turn(ctx, "printer")
	require.NoError(t, err)
	px.arm("WHEN d.alive THEN") // Close's leave never reaches the server
	c.Close()
	require.True(t, px.frozen(), "Close's leave was not held back")
	require.Equal(t, 1, e.count("tickets", ""), "the ticket is still there")
	require.ErrorIs(t, tn.Err(), sentinel.ErrClosed, "Close could not give it back")
	nl, nf = reported()
	require.Zero(t, nl, "a failed give-back is no loss")
	require.Equal(t, 1, nf, "it is reported as a failed release")
	mu.Lock()
	require.Equal(t, sentinel.LossTicket, failures[0].Kind)
	require.Equal(t, tn.Ticket(), failures[0].Token)
	require.ErrorIs(t, failures[0].Err, sentinel.ErrClosed)
	mu.Unlock()
	require.NoError(t, tn.Release(ctx), "Release gives the live ticket up")
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased)
	require.Zero(t, e.count("tickets", ""))
}
