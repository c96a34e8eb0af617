package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// executions.waiters counts the callers waiting (Once with WithWait) for
// the outcome of a key's current claim: a claim that takes the key over
// starts the count again, and a waiter that gives up counts itself out.
// A key once waited for used to notify at every later finish, for nobody.

// wakeUps returns the number of wake-ups for key (kind 'e', the default
// namespace) among notes within d.
func wakeUps(notes <-chan string, key string, d time.Duration) int {
	want := fmt.Sprintf("e%d:%s%s", len("default"), "default", key)
	n := 0
	for _, p := range payloads(notes, "e", d) {
		if p == want {
			n++
		}
	}
	return n
}

// holding starts c's Once on key whose fn returns ret() once finish is
// called (lease ttl, hard TTL of an hour), and returns once fn runs;
// finish returns the Once's error.
func holding(c *sentinel.Client, key string, ttl time.Duration, ret func() (int, error), opts ...sentinel.Option) (finish func() error) {
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(context.Background(), c, key, func(context.Context) (int, error) {
			close(started)
			<-release
			return ret()
		}, append([]sentinel.Option{sentinel.WithTTL(ttl), sentinel.WithHardTTL(time.Hour)}, opts...)...)
		done <- err
	}()
	<-started
	return func() error {
		close(release)
		return <-done
	}
}

// A waiter that gave up on its ctx counts itself out: the outcome it no
// longer waits for sends no wake-up.
func TestOnceWaiterThatGaveUpIsCountedOut(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	a, b := e.client(nil), e.client(nil)
	finish := holding(a, "gaveup", time.Minute, func() (int, error) { return 7, nil })
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, b, "gaveup", func(context.Context) (int, error) { return -1, nil }, sentinel.WithWait())
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'gaveup' AND waiters > 0") == 1
	})
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	require.Equal(t, 0, e.count("executions", "key = 'gaveup' AND waiters > 0"), "the waiter that left is counted out")
	require.NoError(t, finish())
	require.Zero(t, wakeUps(notes, "gaveup", 500*time.Millisecond), "an outcome nobody waits for sent a wake-up")
}

// A waiter that gives up while another transaction holds the key's row
// lock (a renewal, a claim of its own still running on the server after
// its ctx was cancelled) still counts itself out once the lock is gone:
// the count-out used to skip a locked row, leaving a wake-up for nobody.
func TestOnceWaiterCountedOutPastARowLock(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	a, b := e.client(nil), e.client(nil)
	finish := holding(a, "locked", time.Minute, func() (int, error) { return 7, nil })
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, b, "locked", func(context.Context) (int, error) { return -1, nil }, sentinel.WithWait())
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'locked' AND waiters > 0") == 1
	})
	p := e.pool(nil)
	tx, err := p.Begin(context.Background())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(context.Background(), fmt.Sprintf("SELECT 1 FROM %s.executions WHERE key = 'locked' FOR NO KEY UPDATE",
		pgx.Identifier{e.schema}.Sanitize()))
	require.NoError(t, err)
	unlocked := make(chan error, 1)
	time.AfterFunc(300*time.Millisecond, func() { unlocked <- tx.Rollback(context.Background()) }) // the count-out meets the lock
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	require.NoError(t, <-unlocked)
	waitFor(t, 5*time.Second, "the waiter counted out", func() bool {
		return e.count("executions", "key = 'locked' AND waiters > 0") == 0
	})
	require.NoError(t, finish())
	require.Zero(t, wakeUps(notes, "locked", 500*time.Millisecond), "an outcome nobody waits for sent a wake-up")
}

// A waiter woken by a hand-back claims the key itself and runs fn: its
// claim starts the count again, so its own outcome sends no wake-up.
func TestOnceWaiterThatClaimsAfterAHandBackSendsNoWakeUp(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	a, b := e.client(nil), e.client(nil)
	finish := holding(a, "handback", time.Minute, func() (int, error) { return 0, sentinel.Retryable(errors.New("busy")) })
	got := make(chan error, 1)
	go func() {
		res, err := sentinel.Once(context.Background(), b, "handback", func(context.Context) (int, error) { return 8, nil },
			sentinel.WithWait())
		if err == nil && (res.Cached || res.Value != 8) {
			err = fmt.Errorf("waiter got %+v, want its own 8", res)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'handback' AND waiters > 0") == 1
	})
	since := time.Now()
	require.Error(t, finish())
	select {
	case err := <-got:
		require.NoError(t, err)
		require.Less(t, time.Since(since), 5*time.Second, "the waiter was not woken by the hand-back")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the hand-back")
	}
	require.Equal(t, 1, wakeUps(notes, "handback", 500*time.Millisecond), "wake-ups: the hand-back's alone")
}

// A re-run by a waiter (WithRerun) starts the count again: the re-run's
// outcome, which nobody waits for, sends no wake-up.
func TestOnceRerunByAWaiterSendsNoWakeUp(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	a, b := e.client(nil), e.client(nil)
	finish := holding(a, "rerun", time.Minute, func() (int, error) { return 0, errors.New("boom") }, sentinel.WithRerun(3))
	got := make(chan error, 1)
	go func() {
		res, err := sentinel.Once(context.Background(), b, "rerun", func(context.Context) (int, error) { return 9, nil },
			sentinel.WithWait(), sentinel.WithRerun(3))
		if err == nil && (res.Cached || res.Value != 9) {
			err = fmt.Errorf("waiter got %+v, want its own 9", res)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'rerun' AND waiters > 0") == 1
	})
	require.ErrorIs(t, finish(), sentinel.ErrUncertain)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not re-run the key")
	}
	ex, err := a.Inspect(ctxT(t), "rerun")
	require.NoError(t, err)
	require.Equal(t, 2, ex.Attempt)
	require.Equal(t, 1, wakeUps(notes, "rerun", 500*time.Millisecond), "wake-ups: the failed attempt's alone")
}

// A waiter woken by a hand-back that finds the key claimed again by
// someone else keeps waiting, and the next outcome wakes it: the claim
// that started the count again does not lose it.
func TestOnceWaiterKeepsWaitingAcrossANewClaim(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	const ttl = 2 * time.Second
	a, b, c := e.client(nil), e.client(nil), e.client(nil)
	// a's hand-back sends no wake-up: b re-checks at a's lease expiry, by
	// which time c holds the key.
	sentinel.DropWakes(a)
	finish := holding(a, "again", ttl, func() (int, error) { return 0, sentinel.Retryable(errors.New("busy")) })
	got := make(chan error, 1)
	go func() {
		res, err := sentinel.Once(context.Background(), b, "again", func(context.Context) (int, error) { return -1, nil },
			sentinel.WithWait())
		if err == nil && (!res.Cached || res.Value != 7) {
			err = fmt.Errorf("waiter got %+v, want c's 7, cached", res)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'again' AND waiters > 0") == 1
	})
	require.Error(t, finish())
	finishC := running(c, "again")
	waitFor(t, 10*time.Second, "the waiter counted in on c's claim", func() bool {
		return e.count("executions", "key = 'again' AND waiters > 0 AND owner = $1", c.Owner()) == 1
	})
	select {
	case err := <-got:
		t.Fatalf("the waiter returned (%v) while c runs fn", err)
	default:
	}
	completed := time.Now()
	require.NoError(t, finishC())
	woken(t, got, completed)
	require.Equal(t, 1, wakeUps(notes, "again", 500*time.Millisecond), "wake-ups: c's completion's")
}

// A claim that takes a key over sets its count of waiters to 0, through
// the single claim statement (once_claim, migration 19) and through the
// coalescer's set statement (sqlClaimSet) alike, a takeover of a claim and
// a re-run; a claim that finds the key held leaves the count alone.
func TestTakeoverStartsTheWaitersCountAgain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	claimErr := func(key string) (bool, error) {
		row := sentinel.CoQueryRow(ctx, c, sentinel.CoClaim, sentinel.ClaimSQL(c), "default", key, "executing", "o", "h", 1,
			int64(60_000_000), int64(600_000_000), nil, 5, int64(0))
		_, claimed, err := sentinel.ScanClaim(row, "default", key, sentinel.StateExecuting, "o", "h", 1)
		return claimed, err
	}
	claim := func(key string) bool {
		claimed, err := claimErr(key)
		require.NoError(t, err, key)
		return claimed
	}
	// expire leaves key's claim in state with its lease ended, counted as
	// waited for by 3.
	expire := func(key, state string) {
		_, err := admin.Exec(ctx, "UPDATE "+e.table("executions")+
			" SET state = $2, lease_expires_at = now() - interval '1 second', waiters = 3 WHERE key = $1", key, state)
		require.NoError(t, err)
	}
	waiters := func(key string) int { return e.count("executions", "key = $1 AND waiters > 0", key) }
	keys := []string{"single-claimed", "single-rerun", "set-claimed", "set-rerun"}
	for _, k := range keys {
		require.True(t, claim(k), k)
		expire(k, map[bool]string{true: "claimed", false: "executing"}[k[len(k)-1] == 'd'])
	}
	for _, k := range keys[:2] {
		require.True(t, claim(k), k)
		require.Zero(t, waiters(k), "%s: the takeover left the earlier claim's waiters counted", k)
	}
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	sets := sentinel.CoSets(c)
	var wg sync.WaitGroup
	claimed, errs := make([]bool, 2), make([]error, 2)
	for i, k := range keys[2:] {
		wg.Go(func() { claimed[i], errs[i] = claimErr(k) })
	}
	waitQueued(t, queued, sentinel.CoClaim, 2)
	release()
	wg.Wait()
	for i, k := range keys[2:] {
		require.NoError(t, errs[i], k)
		require.True(t, claimed[i], k)
	}
	require.Greater(t, sentinel.CoSets(c), sets, "the queued claims went out as a set statement")
	for _, k := range keys[2:] {
		require.Zero(t, waiters(k), "%s: the set's takeover left the earlier claim's waiters counted", k)
	}
	// Held: not claimed, the count (of waiters of the current claim) kept.
	_, err := admin.Exec(ctx, "UPDATE "+e.table("executions")+" SET waiters = 2 WHERE key = 'single-claimed'")
	require.NoError(t, err)
	require.False(t, claim("single-claimed"))
	require.Equal(t, 1, waiters("single-claimed"))
}

// Client.Close ends a Once waiting with WithWait, as it ends a Lease's
// wait: the waiter returns ErrClosed at once, counted out of the claim it
// waited for. It went on waiting through the still-open pool until its
// ctx ended (minutes, in a deploy's shutdown), and counted out, if at
// all, on a pool its owner was about to close.
func TestCloseEndsAOnceWaiting(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(nil), e.client(nil)
	finish := holding(a, "closing", time.Minute, func() (int, error) { return 7, nil })
	got := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(context.Background(), b, "closing", func(context.Context) (int, error) { return -1, nil }, sentinel.WithWait())
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = 'closing' AND waiters > 0") == 1
	})
	closed := time.Now()
	b.Close()
	select {
	case err := <-got:
		require.ErrorIs(t, err, sentinel.ErrClosed)
		require.Less(t, time.Since(closed), 5*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("the Once waiting on a closed client did not return")
	}
	require.Equal(t, 0, e.count("executions", "key = 'closing' AND waiters > 0"), "the waiter Close ended is counted out")
	require.NoError(t, finish())
	_, err := sentinel.Once(context.Background(), b, "closing", func(context.Context) (int, error) { return -1, nil }, sentinel.WithWait())
	require.ErrorIs(t, err, sentinel.ErrClosed, "a wait on a closed client")
}
