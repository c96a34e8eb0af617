package sentinel_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// notifications listens on e's release channel and returns the payloads
// it receives, for asserting which statements notify.
func notifications(t *testing.T, e *env) <-chan string {
	t.Helper()
	return notificationsOn(t, "sentinel_release."+e.schema)
}

// notificationsOn is notifications on channel (a process's own, say: a
// registration's channel column).
func notificationsOn(t *testing.T, channel string) <-chan string {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dbURL)
	require.NoError(t, err)
	_, err = conn.Exec(ctxT(t), "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan string, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			out <- n.Payload
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = conn.Close(context.Background())
	})
	return out
}

// noneWithin fails when a notification arrives within d.
func noneWithin(t *testing.T, ch <-chan string, d time.Duration, what string) {
	t.Helper()
	select {
	case p := <-ch:
		t.Fatalf("%s: unexpected NOTIFY %q", what, p)
	case <-time.After(d):
	}
}

// A release notifies only when a caller waits for the key: a transaction
// that calls NOTIFY serializes its commit on a database-wide lock. A waiter
// that got the lease, or gave up, counts itself out, so later releases
// notify nobody again.
func TestReleaseNotifiesOnlyWhenSomeoneWaits(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	notes := notifications(t, e)
	a, b := e.client(&sentinel.Config{DefaultTTL: time.Minute}), e.client(&sentinel.Config{DefaultTTL: time.Minute})

	// Nobody waits: no NOTIFY, from Release nor from Close.
	l, err := a.Lease(ctx, "quiet")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	noneWithin(t, notes, 300*time.Millisecond, "release with no waiter")
	_, err = a.Lease(ctx, "quiet")
	require.NoError(t, err)
	c := e.client(nil)
	_, err = c.Lease(ctx, "closed")
	require.NoError(t, err)
	c.Close()
	noneWithin(t, notes, 300*time.Millisecond, "Close with no waiter")

	// A waiter: the release hands the lease to it (issue 30) and notifies
	// it by its registration, on its process's channel (migration 14);
	// the grant counts it out.
	l, err = a.Lease(ctx, "waited")
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l2, err := b.Lease(ctx, "waited", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	require.Eventually(t, func() bool { return e.count("leases", "key = 'waited' AND waiters = 1") == 1 },
		10*time.Second, 5*time.Millisecond, "the waiter counts itself in")
	var channel string
	require.NoError(t, admin.QueryRow(ctx, "SELECT channel FROM "+e.table("lease_waiters")+" WHERE key = 'waited'").Scan(&channel))
	direct := notificationsOn(t, channel)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	select {
	case p := <-direct:
		require.True(t, strings.HasPrefix(p, "w"+fmt.Sprint(len("default"))+":default"), "a grant's notification, got %q", p)
	case <-time.After(5 * time.Second):
		t.Fatal("the release did not notify its waiter")
	}
	noneWithin(t, notes, 300*time.Millisecond, "a grant's wake-up on the schema's channel")
	l2 := <-got
	require.NotNil(t, l2)
	require.Less(t, time.Since(released), 5*time.Second)
	require.Equal(t, 0, e.count("leases", "key = 'waited' AND waiters <> 0"), "the grant counts the waiter out")
	require.NoError(t, l2.Release(ctx))
	noneWithin(t, notes, 300*time.Millisecond, "release after the waiter left")

	// A waiter that gives up counts itself out.
	l, err = a.Lease(ctx, "waited")
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = b.Lease(wctx, "waited", sentinel.WithWait())
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 0, e.count("leases", "key = 'waited' AND waiters <> 0"), "a waiter that gives up counts itself out")
	require.NoError(t, l.Release(ctx))
	noneWithin(t, notes, 300*time.Millisecond, "release after the waiter gave up")
}

// Releases racing waiters that count themselves in: whichever comes first,
// every waiter is woken by the release (or sees it at once), never left to
// wait for the holder's expiry. The TTL is a minute, so a missed wake-up
// shows as a waiter that takes seconds instead of milliseconds.
func TestLeaseWaitNeverMissesARelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: time.Minute}
	holder, waiter := e.client(cfg), e.client(cfg)
	const rounds, parallel = 60, 4
	slowest := raceRounds(parallel, rounds, func(p, i int, r *rand.Rand) (time.Duration, bool) {
		key := fmt.Sprintf("race-%d-%d", p, i)
		l, err := holder.Lease(ctx, key)
		if err != nil {
			t.Error(err)
			return 0, false
		}
		got := make(chan error, 1)
		go func() {
			l2, err := waiter.Lease(ctx, key, sentinel.WithWait())
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// Release anywhere from before the waiter's first
		// attempt to well after it counted itself in.
		time.Sleep(time.Duration(r.IntN(4000)) * time.Microsecond)
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Error(err)
			return 0, false
		}
		select {
		case err := <-got:
			if err != nil {
				t.Error(err)
				return 0, false
			}
		case <-time.After(20 * time.Second):
			t.Errorf("round %d/%d: the waiter missed the release", p, i)
			return 0, false
		}
		return time.Since(released), true
	})
	t.Logf("slowest hand-over after release: %s", slowest)
	// Prompt: a wake-up or the re-check after counting in, never the TTL.
	require.Less(t, slowest, 5*time.Second)
	require.Equal(t, 0, e.count("leases", "waiters <> 0"), "every waiter counted itself out")
}

// raceRounds runs rounds of round in each of parallel goroutines, each with
// a random source of its own, and returns the slowest latency the rounds
// reported. A round that returns false has reported its failure: its
// goroutine stops.
func raceRounds(parallel, rounds int, round func(p, i int, r *rand.Rand) (time.Duration, bool)) time.Duration {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var slowest time.Duration
	for p := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(p), uint64(time.Now().UnixNano())))
			for i := range rounds {
				d, ok := round(p, i, r)
				if !ok {
					return
				}
				mu.Lock()
				slowest = max(slowest, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return slowest
}
