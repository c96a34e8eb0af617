package sentinel_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// resignCutOff holds the group's leadership row in a transaction of the
// test (FOR NO KEY UPDATE, which the resignation's UPDATE waits for),
// starts el.Resign (or stop, when not nil: the release that follows), and cuts off its release statement `times` times: it
// waits until the statement's backend waits for that lock and terminates
// it, so the release fails without committing, deterministically. It
// returns the test transaction (rolled back in cleanup) and a channel with
// Resign's result.
func resignCutOff(t *testing.T, e *env, el *sentinel.Elector, group string, times int, stop ...func() error) (pgx.Tx, <-chan error) {
	t.Helper()
	ctx := ctxT(t)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leaders")+" WHERE election = $1 FOR NO KEY UPDATE", group)
	require.NoError(t, err)
	var holder int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&holder))
	resigned := make(chan error, 1)
	go func() {
		if len(stop) > 0 {
			resigned <- stop[0]()
			return
		}
		resigned <- el.Resign(ctx)
	}()
	for i := range times {
		var waiter int32
		require.Eventually(t, func() bool {
			err := admin.QueryRow(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))", holder).Scan(&waiter)
			return err == nil
		}, 10*time.Second, 5*time.Millisecond, "release attempt %d never waited for the leadership row", i+1)
		terminateAbandoned(t, waiter)
	}
	return tx, resigned
}

// Resign whose release statement failed (its backend was terminated while
// it waited for a lock: nothing committed) returned nil, "stepped down",
// while the term stayed live in the database: Leader still named this
// elector and every follower slept until the term's expiry, a TTL later,
// and nothing told the caller to retry. The release is now tried once
// more; when that fails too Resign returns the failure, and a second
// Resign retries the release: nil once the term is released.
func TestElectorResignThatDidNotCommitSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 5 * time.Second})
	el, err := c.Elector("resign-cut", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)
	term := el.Term()

	tx, resigned := resignCutOff(t, e, el, "resign-cut", 2)
	var err1 error
	select {
	case err1 = <-resigned:
	case <-time.After(10 * time.Second):
		t.Fatal("Resign did not return")
	}
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 1, e.count("leaders", "election = 'resign-cut' AND term = $1 AND expires_at > now()", term),
		"the release did not commit: the term is live")
	require.Error(t, err1, "Resign must not report a release that did not commit")
	require.ErrorContains(t, err1, "call Resign again")
	require.False(t, el.IsLeader(), "the elector stepped down locally all the same")

	require.NoError(t, el.Resign(ctx), "Resign again releases the term")
	require.Zero(t, e.count("leaders", "election = 'resign-cut' AND expires_at > now()"), "released")
	require.NoError(t, el.Resign(ctx), "and once more: nothing to do")

	// One failed attempt only: the second one releases the term, and
	// Resign returns nil.
	el, err = c.Elector("resign-cut-once", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)
	tx, resigned = resignCutOff(t, e, el, "resign-cut-once", 1)
	require.NoError(t, tx.Rollback(ctx)) // the retry waits for the row, then releases it
	select {
	case err := <-resigned:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Resign did not return")
	}
	require.Zero(t, e.count("leaders", "election = 'resign-cut-once' AND expires_at > now()"), "released")
}

// The same, but the release committed and its reply was lost (the
// connection black-holed after the batch was sent): the retry finds the
// term released, and Resign returns nil (it did before by chance, as it
// returned nil for every failure).
func TestElectorResignRetriedAfterALostReplyIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 500 * time.Millisecond})
	el, err := c.Elector("resign-lost", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)
	px.armAfter("next_ttl_us = NULL") // sqlResign's handover
	err = el.Resign(ctx)
	require.True(t, px.frozen(), "the resignation's reply was not cut")
	require.Zero(t, e.count("leaders", "election = 'resign-lost' AND expires_at > now()"), "the release committed")
	require.NoError(t, err, "the reply was lost, but the release committed")
	require.NoError(t, el.Resign(ctx), "and again")
}

// Run whose ctx ended while it led, and whose release then failed (both
// attempts cut off, nothing committed), returned nil, as for a clean
// stop: the term stayed live until its expiry, the followers asleep
// until then, and the caller, told the elector had given leadership up,
// had no reason to retry. Run now returns the release's error, and Resign
// (after Run returned) retries it.
func TestElectorRunSaysWhenItsReleaseFailed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 5 * time.Second})
	el, err := c.Elector("run-cut", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stop := runElector(t, el)
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)

	tx, stopped := resignCutOff(t, e, el, "run-cut", 2, stop)
	require.NoError(t, tx.Rollback(ctx)) // both attempts are over; Run's leave must not wait for the row
	var runErr error
	select {
	case runErr = <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Equal(t, 1, e.count("leaders", "election = 'run-cut' AND expires_at > now()"), "the release did not commit")
	require.Error(t, runErr, "Run must say that the term it gave up is still live")
	require.ErrorContains(t, runErr, "call Resign again")
	require.NoError(t, el.Resign(ctx), "Resign after Run returned releases the term")
	require.Zero(t, e.count("leaders", "election = 'run-cut' AND expires_at > now()"), "released")
}

// A term whose release failed was reported to no observer: the elector
// logged a warning, TermChange said it stepped down (Err nil), and
// Observer.ReleaseFailed, which reports every other failed release (a
// lease's, a turn's, Close's), was not called, so an alert on it never
// saw a term left live until its expiry. It is now called, Kind
// LossLeader, once per term whose release (and its retry) failed.
func TestElectorFailedReleaseIsObserved(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	failures := make(chan sentinel.ReleaseFailure, 10)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 5 * time.Second,
		Observer: &sentinel.Observer{ReleaseFailed: func(f sentinel.ReleaseFailure) { failures <- f }}})
	el, err := c.Elector("observed-cut", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)
	term := el.Term()

	tx, resigned := resignCutOff(t, e, el, "observed-cut", 2)
	require.NoError(t, tx.Rollback(ctx))
	require.Error(t, <-resigned)
	select {
	case f := <-failures:
		require.Equal(t, sentinel.LossLeader, f.Kind)
		require.Equal(t, "observed-cut", f.Key)
		require.Equal(t, term, f.Token)
		require.Error(t, f.Err)
	case <-time.After(5 * time.Second):
		t.Fatal("Observer.ReleaseFailed was not called for the term's failed release")
	}
	require.NoError(t, el.Resign(ctx))
	require.Empty(t, failures, "once")
}

// Client.Close ends a leader's term; Run then releases it. That release
// was tried once, bounded by the term's local deadline rather than
// ReleaseTimeout, and its failure was neither retried nor reported: no
// Observer.ReleaseFailed, no error from Run (ErrClosed, as for a clean
// stop) or from a Resign racing Close (nil), and no warning when the
// deadline cut it off, although the term stayed live until its expiry and
// the followers slept until then. A term Close ended is a step-down, as a
// Resign is: its release is now retried once, a failure is reported to
// Observer.ReleaseFailed, Run returns an error matching ErrClosed that
// says the term is still live, and Resign retries the release.
func TestElectorCloseWhoseReleaseFailedSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	failures := make(chan sentinel.ReleaseFailure, 10)
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 5 * time.Second,
		Observer: &sentinel.Observer{ReleaseFailed: func(f sentinel.ReleaseFailure) { failures <- f }}})
	el, err := c.Elector("close-cut", sentinel.ElectorOptions{})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	waitFor(t, 10*time.Second, "to lead", el.IsLeader)
	term := el.Term()

	tx, stopped := resignCutOff(t, e, el, "close-cut", 2, func() error { c.Close(); return <-ran })
	require.NoError(t, tx.Rollback(ctx))
	var runErr error
	select {
	case runErr = <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Equal(t, 1, e.count("leaders", "election = 'close-cut' AND expires_at > now()"), "the release did not commit")
	require.ErrorIs(t, runErr, sentinel.ErrClosed)
	require.ErrorContains(t, runErr, "call Resign again", "Run says the term it gave up is still live")
	select {
	case f := <-failures:
		require.Equal(t, sentinel.LossLeader, f.Kind)
		require.Equal(t, term, f.Token)
	case <-time.After(5 * time.Second):
		t.Fatal("Observer.ReleaseFailed was not called for the term's failed release")
	}
	require.NoError(t, el.Resign(ctx), "Resign after Run returned releases the term")
	require.Zero(t, e.count("leaders", "election = 'close-cut' AND expires_at > now()"), "released")
	require.Empty(t, failures, "once")
}

// A resignation stops the term's renewals, then sends its release. When
// the term's local deadline passed while that release was in flight
// (here it waits for a lock on the leadership row), the deadline timer
// reported the term lost at once (Observer.LeaseLost, Kind LossLeader,
// and a warning "lease ended"), although the release then found the term
// still live and committed, and Resign returned nil: a dashboard counted
// a lost term nothing else reports. The end is now reported once the
// release's outcome is known: no loss when it released the live term;
// the loss, once, when the term had expired first (here the test's
// transaction expires it), and then TermChanged's Err says the term was
// lost (it said nil, a step-down), and Resign returns the loss (it
// returned nil).
func TestElectorReleaseAcrossTheDeadlineIsNoLossToTheObserver(t *testing.T) {
	for _, commit := range []bool{true, false} {
		name := "released"
		if !commit {
			name = "expired first"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			var losses atomic.Int32
			var logs lockedBuffer
			demoted := make(chan sentinel.TermChange, 1)
			c := e.client(&sentinel.Config{DefaultTTL: 3 * time.Second, SafetyMargin: 900 * time.Millisecond, ReleaseTimeout: 20 * time.Second,
				Observer: &sentinel.Observer{LeaseLost: func(l sentinel.LeaseLoss) {
					if l.Kind == sentinel.LossLeader {
						losses.Add(1)
					}
				}, TermChanged: func(tc sentinel.TermChange) {
					if tc.Self && tc.Demoted {
						demoted <- tc
					}
				}},
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			el, err := c.Elector("slow-release", sentinel.ElectorOptions{})
			require.NoError(t, err)
			runElector(t, el)
			waitFor(t, 10*time.Second, "to lead", el.IsLeader)

			tx, err := admin.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leaders")+" WHERE election = 'slow-release' FOR NO KEY UPDATE")
			require.NoError(t, err)
			deadline := el.Deadline() // renewals wait for the lock from now on
			require.False(t, deadline.IsZero())
			resigned := make(chan error, 1)
			go func() { resigned <- el.Resign(ctx) }()
			// The term's deadline passes while the release waits; the
			// row's expiry comes 0.9s after it.
			time.Sleep(time.Until(deadline) + 300*time.Millisecond)
			if !commit {
				_, err = tx.Exec(ctx, "UPDATE "+e.table("leaders")+" SET expires_at = clock_timestamp() WHERE election = 'slow-release'")
				require.NoError(t, err)
			}
			require.NoError(t, tx.Commit(ctx))
			select {
			case err = <-resigned:
			case <-time.After(20 * time.Second):
				t.Fatal("Resign did not return")
			}
			tc := <-demoted
			if commit {
				require.NoError(t, err)
				require.Zero(t, losses.Load(), "the Observer was told the term was lost although its release committed")
				require.NotContains(t, logs.String(), "lease ended")
				require.NoError(t, tc.Err, "a step-down")
				return
			}
			require.Equal(t, int32(1), losses.Load(), "the loss is reported once")
			require.Contains(t, logs.String(), "lease ended")
			require.ErrorIs(t, tc.Err, sentinel.ErrLeaseLost, "TermChanged says the term was lost, as LeaseLost does")
			// So does Resign, as Lease.Release reports a lease lost before
			// its release: OnElected's work may have overlapped the next
			// leader's. It returned nil.
			require.ErrorIs(t, err, sentinel.ErrLeaseLost, "Resign says the term was lost before its release")
			require.ErrorContains(t, err, "lost before it was released")
			require.False(t, el.IsLeader())
			require.NoError(t, el.Resign(ctx), "a Resign after the term ended: this elector does not lead")
		})
	}
}
