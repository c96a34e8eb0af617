package sentinel_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Issue 26.9: one key's row locked by another transaction for longer than
// the TTL (here an open transaction holding it FOR SHARE) must not hold up
// the completions of other keys. Completions leave the heartbeat before
// they are sent: a batch of them waiting on one row (and every completion
// queued behind it in the lane) outlived their leases, and their healthy
// runs were refused as uncertain.
func TestSlowBatchDoesNotHoldOtherCompletions(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = time.Second
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	const n = 8
	type outcome struct {
		key string
		err error
	}
	out := make(chan outcome, 3*n)
	var wg sync.WaitGroup
	run := func(key string, fn func(context.Context) (int, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sentinel.Once(ctx, c, key, fn)
			out <- outcome{key, err}
		}()
	}
	// The locked key and n others run; their completions share a batch.
	entered := make(chan struct{}, n+1)
	proceed := make(chan struct{})
	wait := func(context.Context) (int, error) { entered <- struct{}{}; <-proceed; return 1, nil }
	run("a-locked", wait)
	for i := range n {
		run(fmt.Sprintf("b-%d", i), wait)
	}
	for range n + 1 {
		<-entered
	}
	guard, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer guard.Rollback(context.Background()) //nolint:errcheck
	_, err = guard.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'a-locked' FOR SHARE")
	require.NoError(t, err)

	queued, release := sentinel.HoldCoalescer(c, sentinel.CoFinish)
	close(proceed)
	waitQueued(t, queued, sentinel.CoFinish, n+1)
	release()
	// More callers, on other keys, complete while the batch is stuck.
	for i := range n {
		run(fmt.Sprintf("c-%d", i), func(context.Context) (int, error) { return 2, nil })
	}
	time.Sleep(3 * ttl / 2) // the lock is held for 1.5 TTL
	require.NoError(t, guard.Rollback(ctx))
	wg.Wait()
	close(out)
	var refused []string
	for o := range out {
		if o.key != "a-locked" && o.err != nil { // a-locked's own row was locked past its lease, as without coalescing
			refused = append(refused, fmt.Sprintf("%s: %v", o.key, o.err))
		}
	}
	require.Empty(t, refused, "%d of %d healthy runs of other keys failed", len(refused), 2*n)
}

// TestSlowBatchFigures measures issue 26.9 (not a check; run with
// SENTINEL_MEASURE=1, under flock /tmp/sentinel-bench.lock): 32 callers
// on a pool of 4 complete fresh keys through the coalescer while one
// key's row is locked FOR SHARE by an open transaction for 0.5, 1 and 2
// TTL (TTL 1s). It reports, for the calls in flight at any time while the
// row was locked, how many healthy runs were refused and their latency,
// and how many completed while it was locked.
func TestSlowBatchFigures(t *testing.T) {
	if os.Getenv("SENTINEL_MEASURE") == "" {
		t.Skip("a measurement: set SENTINEL_MEASURE=1")
	}
	const ttl = time.Second
	type call struct {
		t0, t1 time.Time
		failed bool
	}
	for _, hold := range []time.Duration{ttl / 2, ttl, 2 * ttl} {
		e := newEnv(t)
		ctx := ctxT(t)
		c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.MaxConns = 4 }), &sentinel.Config{DefaultTTL: ttl})
		// The locked key: its fn returns once its row is locked.
		locked := make(chan struct{})
		lockedDone := make(chan error, 1)
		entered := make(chan struct{})
		go func() {
			_, err := sentinel.Once(ctx, c, "locked", func(context.Context) (int, error) {
				close(entered)
				<-locked
				return 0, nil
			})
			lockedDone <- err
		}()
		<-entered
		stop := make(chan struct{})
		var mu sync.Mutex
		var calls []call
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					t0 := time.Now()
					_, err := sentinel.Once(ctx, c, fmt.Sprintf("k-%d-%d", g, i), func(context.Context) (int, error) {
						time.Sleep(2 * time.Millisecond)
						return i, nil
					})
					mu.Lock()
					calls = append(calls, call{t0, time.Now(), err != nil})
					mu.Unlock()
				}
			}()
		}
		time.Sleep(500 * time.Millisecond) // warm
		guard, err := admin.Begin(ctx)
		require.NoError(t, err)
		_, err = guard.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'locked' FOR SHARE")
		require.NoError(t, err)
		from := time.Now()
		close(locked)
		time.Sleep(hold)
		require.NoError(t, guard.Rollback(ctx))
		to := time.Now()
		time.Sleep(3 * ttl) // let the calls in flight finish
		close(stop)
		wg.Wait()
		<-lockedDone
		var lat []time.Duration
		refused, done := 0, 0
		for _, cl := range calls {
			if cl.t0.Before(to) && cl.t1.After(from) {
				lat = append(lat, cl.t1.Sub(cl.t0))
				if cl.failed {
					refused++
				}
			}
			if cl.t1.After(from) && cl.t1.Before(to) && !cl.failed {
				done++
			}
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		pct := func(p float64) time.Duration {
			return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
		}
		t.Logf("row locked %.1f TTL: %d calls in flight meanwhile, %d refused, %d completed meanwhile; latency p50 %v p99 %v max %v",
			float64(hold)/float64(ttl), len(lat), refused, done, pct(0.5), pct(0.99), pct(1))
	}
}
