package sentinel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A Once's outcome wakes the callers waiting for its key (WithWait) after
// its completion commits, in a transaction of its own (wake.go): the
// completion sends no NOTIFY, so completions of many keys with waiters
// share flushes.

// onceWaiter starts c's Once(WithWait) on key and returns once the call
// counted itself a waiter of the key's execution; its result arrives on
// the channel.
func onceWaiter(t *testing.T, e *env, c *sentinel.Client, key string) <-chan error {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		res, err := sentinel.Once(context.Background(), c, key, func(context.Context) (int, error) { return -1, nil },
			sentinel.WithWait())
		if err == nil && (!res.Cached || res.Value != 7) {
			err = fmt.Errorf("waiter got %+v, want the executor's 7, cached", res)
		}
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiter counted in", func() bool {
		return e.count("executions", "key = $1 AND waiters > 0", key) == 1
	})
	return got
}

// running starts c's Once on key, whose fn runs until finish is called
// and then returns 7 (lease of a minute, hard TTL of an hour), and returns
// once fn runs; finish returns the Once's error.
func running(c *sentinel.Client, key string) (finish func() error) {
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(context.Background(), c, key, func(context.Context) (int, error) {
			close(started)
			<-release
			return 7, nil
		}, sentinel.WithTTL(time.Minute), sentinel.WithHardTTL(time.Hour))
		done <- err
	}()
	<-started
	return func() error {
		close(release)
		return <-done
	}
}

// woken waits for a waiter that only a wake-up can make prompt: the
// executor's lease lasts a minute, and the waiter re-checks at its expiry.
func woken(t *testing.T, got <-chan error, since time.Time) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err)
		require.Less(t, time.Since(since), 5*time.Second, "not woken by the outcome")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken by the outcome")
	}
}

// The waiter is woken by the completion's wake-up, on the schema's
// channel; with the executor's wake-ups dropped (as when its process dies
// between the commit and the wake-up) nothing is sent at all: the
// completion statement itself does not notify.
func TestOnceOutcomeWakesAfterTheCommit(t *testing.T) {
	e := newEnv(t)
	notes := notifications(t, e)
	for _, drop := range []bool{false, true} {
		key := fmt.Sprintf("pay-%v", drop)
		a, b := e.client(nil), e.client(nil)
		if drop {
			sentinel.DropWakes(a)
		}
		finish := running(a, key)
		got := onceWaiter(t, e, b, key)
		completed := time.Now()
		require.NoError(t, finish())
		if drop {
			noneWithin(t, notes, 500*time.Millisecond, "a completion whose wake-up was dropped")
			select {
			case err := <-got:
				t.Fatalf("the waiter returned (%v) with no wake-up sent", err)
			default:
			}
			continue
		}
		select {
		case p := <-notes:
			require.Equal(t, fmt.Sprintf("e%d:%s%s", len("default"), "default", key), p)
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up on the schema's channel")
		}
		woken(t, got, completed)
	}
}

// Completions coalesced into one statement (a client with one connection
// and many executions finishing at once) wake each key's waiters.
func TestCoalescedOutcomesWakeTheirWaiters(t *testing.T) {
	e := newEnv(t)
	const n = 8
	a := e.clientOn(e.pool(func(c *pgxpool.Config) { c.MaxConns = 1 }), nil)
	b := e.client(nil)
	finish := make(chan struct{})
	var started, done sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			_, err := sentinel.Once(context.Background(), a, fmt.Sprintf("k%d", i), func(context.Context) (int, error) {
				started.Done()
				<-finish
				return 7, nil
			}, sentinel.WithTTL(time.Minute), sentinel.WithHardTTL(time.Hour))
			errs <- err
		}()
	}
	started.Wait()
	waiters := make([]<-chan error, n)
	for i := range n {
		waiters[i] = onceWaiter(t, e, b, fmt.Sprintf("k%d", i))
	}
	completed := time.Now()
	close(finish)
	done.Wait()
	for range n {
		require.NoError(t, <-errs)
	}
	for _, got := range waiters {
		woken(t, got, completed)
	}
}

// OnceTx completes in the caller's transaction, whose commit the library
// does not see: its completion notifies in that transaction, so the
// waiter is woken when it commits, and never by a transaction rolled
// back.
func TestOnceTxOutcomeWakesAtItsCommit(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(nil), e.client(nil)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.OnceTx(context.Background(), a, "tx", func(context.Context, pgx.Tx) (int, error) {
			close(started)
			<-finish
			return 7, nil
		}, sentinel.WithTTL(time.Minute), sentinel.WithHardTTL(time.Hour))
		done <- err
	}()
	<-started
	got := onceWaiter(t, e, b, "tx")
	completed := time.Now()
	close(finish)
	require.NoError(t, <-done)
	woken(t, got, completed)
}

// A wake-up lost with its sender (the executor's process killed between
// its completion's commit and the wake-up; here dropped): the waiter finds
// the outcome at its re-check, the executor's lease expiry as last read,
// and replays it.
func TestLostWakeUpOnceWaiterFindsTheOutcome(t *testing.T) {
	e := newEnv(t)
	const ttl = 1500 * time.Millisecond
	a, b := e.client(nil), e.client(nil)
	sentinel.DropWakes(a)
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(context.Background(), a, "lost", func(context.Context) (int, error) {
			close(started)
			<-finish
			return 7, nil
		}, sentinel.WithTTL(ttl), sentinel.WithHardTTL(time.Hour))
		done <- err
	}()
	<-started
	got := onceWaiter(t, e, b, "lost")
	completed := time.Now()
	close(finish)
	require.NoError(t, <-done)
	select {
	case err := <-got:
		require.NoError(t, err)
		took := time.Since(completed)
		t.Logf("the waiter replayed the outcome %s after a completion that sent no wake-up (TTL %s)", took, ttl)
		require.Less(t, took, 2*ttl, "by its re-check at the executor's lease expiry")
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never found the outcome")
	}
}

// claimCounter counts the Once claims a pool sends (sqlClaim calls
// once_claim_packed, set statements included).
type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "once_claim_packed") {
		c.n.Add(1)
	}
	return ctx
}
func (c *claimCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A waiter on a client whose listener is new sleeps after counting itself
// in, and claims again only when woken by the outcome. The listener's first
// connection used to wake every subscriber as if it had reconnected (a
// wake-up may have been missed while it was down), though each had waited
// for that connection before its first claim: the waiter claimed a second
// time at once, and an outcome committed before that claim reached it with
// no wake-up at all (TestOnceOutcomeWakesAfterTheCommit failed so on a
// loaded CI machine).
func TestOnceWaiterOnANewListenerSleepsUntilWoken(t *testing.T) {
	e := newEnv(t)
	a := e.client(nil)
	claims := &claimCounter{}
	b := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = claims }), nil)
	finish := running(a, "pay")
	got := onceWaiter(t, e, b, "pay")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(1), claims.n.Load(), "claims before the outcome")
	completed := time.Now()
	require.NoError(t, finish())
	woken(t, got, completed)
	require.Equal(t, int64(2), claims.n.Load(), "claims in all: the first, and the one its wake-up made")
}
