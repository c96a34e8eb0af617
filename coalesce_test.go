package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// batchCounter counts the batches a pool sends and the statements in them.
type batchCounter struct {
	counter
	batches, queries atomic.Int64
}

func (b *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	b.batches.Add(1)
	return ctx
}
func (b *batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	b.queries.Add(1)
}
func (b *batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// coalescingClient returns a client whose pool's batches are counted.
func coalescingClient(t *testing.T, e *env, cfg *sentinel.Config) (*sentinel.Client, *batchCounter) {
	bc := &batchCounter{}
	p := e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = bc })
	return e.clientOn(p, cfg), bc
}

// waitQueued waits until n callers queue for kind.
func waitQueued(t *testing.T, queued func(int) int, kind, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return queued(kind) == n }, 20*time.Second, time.Millisecond,
		"want %d callers queued", n)
}

// Claims that share one batch each get their own outcome: fresh keys run
// and complete with their own result, a key found in progress is reported
// in progress, an uncertain key uncertain, a completed one replays, a
// failing fn fails alone. Then a statement the server refuses sinks its batch's
// transaction: every other caller of that batch still gets its own
// outcome, and only the failing one gets the error.
func TestCoalescedClaimsKeepTheirOwnOutcomes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, bc := coalescingClient(t, e, nil)

	for round, bad := range []bool{false, true} {
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
		batchesBefore := bc.batches.Load()
		type outcome struct {
			name string
			res  sentinel.Result[string]
			err  error
		}
		out := make(chan outcome, 20)
		var wg sync.WaitGroup
		run := func(name, key string, fn func(context.Context) (string, error)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := sentinel.Once(ctx, c, key, fn)
				out <- outcome{name, res, err}
			}()
		}
		errOwn := errors.New("charge declined")
		claims := 0
		for i := range 5 {
			key := fmt.Sprintf("fresh-%d-%d", round, i)
			run(key, key, func(context.Context) (string, error) { return "result of " + key, nil })
			claims++
		}
		run("failing", fmt.Sprintf("failing-%d", round), func(context.Context) (string, error) { return "", errOwn })
		// Keys absent when their callers read them, written behind their
		// backs while the claims are queued: each claim statement finds a
		// key in progress, an uncertain one, a completed one.
		busy, lost, done := fmt.Sprintf("busy-%d", round), fmt.Sprintf("lost-%d", round), fmt.Sprintf("done-%d", round)
		run("busy", busy, func(context.Context) (string, error) { t.Error("ran a key in progress"); return "", nil })
		run("lost", lost, func(context.Context) (string, error) { t.Error("ran an uncertain key"); return "", nil })
		run("done", done, func(context.Context) (string, error) { t.Error("ran a completed key"); return "", nil })
		claims += 4
		var badErr error
		if bad {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int
				badErr = sentinel.CoQueryRow(ctx, c, sentinel.CoClaim, "SELECT 1 / $1::int", 0).Scan(&n)
			}()
			claims++
		}
		waitQueued(t, queued, sentinel.CoClaim, claims)
		_, err := admin.Exec(ctx, `INSERT INTO `+e.table("executions")+` (namespace, key, state, owner, token, created_at, updated_at, lease_expires_at, hard_expires_at, completed_at, result)
			VALUES ('default', $1, 'executing', 'other', 1, now(), now(), now() + interval '1 hour', now() + interval '1 hour', NULL, NULL),
			       ('default', $2, 'executing', 'other', 2, now(), now(), now() - interval '1 minute', now() - interval '1 minute', NULL, NULL),
			       ('default', $3, 'completed', 'other', 3, now(), now(), NULL, NULL, now(), '"stored"')`, busy, lost, done)
		require.NoError(t, err)
		release()
		wg.Wait()
		close(out)
		require.Greater(t, bc.batches.Load(), batchesBefore, "the queued claims went out as a batch")
		for o := range out {
			switch o.name {
			case "failing":
				require.ErrorIs(t, o.err, errOwn, o.name)
			case "busy":
				require.ErrorIs(t, o.err, sentinel.ErrInProgress, o.name)
			case "lost":
				require.ErrorIs(t, o.err, sentinel.ErrUncertain, o.name)
			case "done":
				require.NoError(t, o.err, o.name)
				require.True(t, o.res.Cached, o.name)
				require.Equal(t, "stored", o.res.Value)
			default:
				require.NoError(t, o.err, o.name)
				require.False(t, o.res.Cached, o.name)
				require.Equal(t, "result of "+o.name, o.res.Value)
				// Stored: a later call replays it.
				again, err := sentinel.Once(ctx, c, o.name, func(context.Context) (string, error) { return "", errors.New("ran twice") })
				require.NoError(t, err, o.name)
				require.Equal(t, "result of "+o.name, again.Value)
			}
		}
		if bad {
			var pgErr interface{ SQLState() string }
			require.ErrorAs(t, badErr, &pgErr)
			require.Equal(t, "22012", pgErr.SQLState(), "division by zero, its own error")
		}
	}
}

// Lease grants and releases queued behind busy lanes go out together, one
// batch each, and every caller gets its own lease and token.
func TestCoalescedLeasesShareARoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, bc := coalescingClient(t, e, nil)
	const n = 20
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoAcquire)
	leases := make([]*sentinel.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			leases[i], errs[i] = c.Lease(ctx, fmt.Sprintf("k-%d", i))
		}()
	}
	waitQueued(t, queued, sentinel.CoAcquire, n)
	before := bc.batches.Load()
	release()
	wg.Wait()
	require.Equal(t, before+1, bc.batches.Load(), "one batch for the queued grants")
	tokens := map[int64]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, fmt.Sprintf("k-%d", i), leases[i].Key())
		tokens[leases[i].Token()] = true
		h, err := c.Holder(ctx, leases[i].Key())
		require.NoError(t, err)
		require.Equal(t, leases[i].Token(), h.Token)
	}
	require.Len(t, tokens, n, "distinct tokens")

	queued, release = sentinel.HoldCoalescer(c, sentinel.CoRelease)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = leases[i].Release(ctx)
		}()
	}
	waitQueued(t, queued, sentinel.CoRelease, n)
	release()
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		_, err := c.Holder(ctx, leases[i].Key())
		require.ErrorIs(t, err, sentinel.ErrNotFound)
	}
}

// A caller whose ctx ends while it is queued leaves the queue at once,
// with ctx's error, and nothing of its is ever sent.
func TestCoalescedCallerLeavesTheQueueWhenCtxEnds(t *testing.T) {
	e := newEnv(t)
	c, _ := coalescingClient(t, e, nil)
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoAcquire)
	ctx, cancel := context.WithCancel(ctxT(t))
	got := make(chan error, 1)
	go func() {
		_, err := c.Lease(ctx, "gone")
		got <- err
	}()
	waitQueued(t, queued, sentinel.CoAcquire, 1)
	cancel()
	select {
	case err := <-got:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled caller stayed queued")
	}
	require.Equal(t, 0, queued(sentinel.CoAcquire))
	release()
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 0, e.count("leases", "key = 'gone'"), "nothing was sent for it")
}

// A caller whose statement is in flight in a batch stops waiting when its
// own ctx ends, not when a slower statement of another caller in the same
// batch finishes.
func TestCoalescedCallerInFlightLeavesWhenCtxEnds(t *testing.T) {
	e := newEnv(t)
	c, _ := coalescingClient(t, e, nil)
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoRelease)
	slow := make(chan error, 1)
	go func() {
		var s string
		slow <- sentinel.CoQueryRow(ctxT(t), c, sentinel.CoRelease, "SELECT pg_sleep(3)::text").Scan(&s)
	}()
	waitQueued(t, queued, sentinel.CoRelease, 1)
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	quick := make(chan error, 1)
	go func() {
		var n int
		quick <- sentinel.CoQueryRow(ctx, c, sentinel.CoRelease, "SELECT 1").Scan(&n)
	}()
	waitQueued(t, queued, sentinel.CoRelease, 2)
	start := time.Now()
	release() // both go out in one batch, the slow statement first
	select {
	case err := <-quick:
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 2500*time.Millisecond)
	case <-time.After(10 * time.Second):
		t.Fatal("the caller waited past its ctx")
	}
	require.NoError(t, <-slow)
}
