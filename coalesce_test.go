package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
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

	// Round 0: the claims go out as one set statement. Round 1: a foreign
	// statement the server refuses rides along: the claims go out as a
	// pgx.Batch, which fails as a whole. Round 2: a claim the server
	// refuses (a state the table's check rejects) sinks the set statement.
	for round := range 3 {
		bad := round > 0
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
		batchesBefore, setsBefore := bc.batches.Load(), sentinel.CoSets(c)
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
		switch round {
		case 1:
			wg.Add(1)
			go func() {
				defer wg.Done()
				var n int
				badErr = sentinel.CoQueryRow(ctx, c, sentinel.CoClaim, "SELECT 1 / $1::int", 0).Scan(&n)
			}()
			claims++
		case 2:
			wg.Add(1)
			go func() {
				defer wg.Done()
				var claimed bool
				badErr = sentinel.CoQueryRow(ctx, c, sentinel.CoClaim, sentinel.ClaimSQL(c), "default", "bogus-state", "bogus",
					"owner", "host", 1, int64(3_000_000), int64(600_000_000), nil, 1, int64(0)).Scan(&claimed)
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
		if round == 1 {
			require.Greater(t, bc.batches.Load(), batchesBefore, "the queued claims went out as a batch")
		} else {
			require.Greater(t, sentinel.CoSets(c), setsBefore, "the queued claims went out as a set statement")
		}
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
			want := map[int]string{1: "22012", 2: "23514"}[round] // division by zero; check violation
			require.Equal(t, want, pgErr.SQLState(), "its own error")
		}
	}
}

// Lease grants and releases queued behind busy lanes go out together, one
// set statement each, and every caller gets its own lease and token; a
// caller whose key another client holds is told so, alone.
func TestCoalescedLeasesShareARoundTrip(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, bc := coalescingClient(t, e, &sentinel.Config{DefaultTTL: 20 * time.Second})
	other := e.client(&sentinel.Config{Owner: "other", WaitRecheck: time.Minute})
	held, err := other.Lease(ctx, "held")
	require.NoError(t, err)
	defer held.Release(ctx)
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
	var heldErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, heldErr = c.Lease(ctx, "held")
	}()
	waitQueued(t, queued, sentinel.CoAcquire, n+1)
	before, batches := sentinel.CoSets(c), bc.batches.Load()
	release()
	wg.Wait()
	require.Equal(t, before+1, sentinel.CoSets(c), "one set statement for the queued grants")
	require.Equal(t, batches+1, bc.batches.Load(), "one round trip: the set statement and its plan settings")
	var he *sentinel.HeldError
	require.ErrorAs(t, heldErr, &he)
	require.NotNil(t, he.Holder)
	require.Equal(t, held.Token(), he.Holder.Token, "the holder's token")
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

	// A waiter for one of the keys is woken by the set statement's NOTIFY,
	// long before its fallback re-check at the holder's expiry (20 s).
	waited := make(chan error, 1)
	go func() {
		l, err := other.Lease(ctx, "k-0", sentinel.WithWait())
		if err == nil {
			err = l.Release(ctx)
		}
		waited <- err
	}()
	require.Eventually(t, func() bool { return e.count("leases", "key = 'k-0' AND waiters > 0") == 1 },
		20*time.Second, time.Millisecond)
	queued, release = sentinel.HoldCoalescer(c, sentinel.CoRelease)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = leases[i].Release(ctx)
		}()
	}
	waitQueued(t, queued, sentinel.CoRelease, n)
	before = sentinel.CoSets(c)
	release()
	wg.Wait()
	start := time.Now()
	require.Equal(t, before+1, sentinel.CoSets(c), "one set statement for the queued releases")
	select {
	case err := <-waited:
		require.NoError(t, err)
		require.Less(t, time.Since(start), 5*time.Second, "woken by the set statement's notification")
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter missed the release's notification")
	}
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
		slow <- sentinel.CoQueryRow(ctxT(t), c, sentinel.CoRelease, "SELECT pg_sleep(3)::text || $1 || $2", "ns", "slow").Scan(&s)
	}()
	waitQueued(t, queued, sentinel.CoRelease, 1)
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	quick := make(chan error, 1)
	go func() {
		var n int
		// Another key (its first two arguments), so that it rides in the
		// slow statement's batch.
		quick <- sentinel.CoQueryRow(ctx, c, sentinel.CoRelease, "SELECT length($1 || $2)", "ns", "quick").Scan(&n)
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

// Completions queued behind a busy lane go out as one set statement, and
// each gets its own outcome: fresh keys complete with their own results; a
// key taken away from its holder meanwhile has its completion refused
// alone; a caller waiting for one of the keys (WithWait) is woken by the
// batch's notification, well before any fallback re-check.
func TestCoalescedCompletionsKeepTheirOwnOutcomes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, _ := coalescingClient(t, e, &sentinel.Config{DefaultTTL: 10 * time.Second})
	other := e.client(&sentinel.Config{DefaultTTL: 10 * time.Second, WaitRecheck: time.Minute})

	queued, release := sentinel.HoldCoalescer(c, sentinel.CoFinish)
	type outcome struct {
		key string
		res sentinel.Result[string]
		err error
	}
	out := make(chan outcome, 10)
	var wg sync.WaitGroup
	run := func(key string, fn func(context.Context) (string, error)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sentinel.Once(ctx, c, key, fn)
			out <- outcome{key, res, err}
		}()
	}
	for i := range 4 {
		key := fmt.Sprintf("fresh-%d", i)
		run(key, func(context.Context) (string, error) { return "result of " + key, nil })
	}
	run("stolen", func(context.Context) (string, error) {
		// Another claim takes the key over behind the holder's back.
		_, err := admin.Exec(ctx, `UPDATE `+e.table("executions")+` SET token = token + 1000 WHERE key = 'stolen'`)
		return "lost", err
	})
	waiterCounted, watchedRuns := make(chan struct{}), make(chan struct{})
	run("watched", func(context.Context) (string, error) {
		close(watchedRuns)
		<-waiterCounted
		return "result of watched", nil
	})
	waited := make(chan outcome, 1)
	<-watchedRuns
	go func() {
		res, err := sentinel.Once(ctx, other, "watched", func(context.Context) (string, error) {
			return "", errors.New("ran a key in progress")
		}, sentinel.WithWait())
		waited <- outcome{"watched", res, err}
	}()
	require.Eventually(t, func() bool { return e.count("executions", "key = 'watched' AND waiters > 0") == 1 },
		20*time.Second, time.Millisecond)
	close(waiterCounted)
	waitQueued(t, queued, sentinel.CoFinish, 6)
	setsBefore := sentinel.CoSets(c)
	start := time.Now()
	release()
	wg.Wait()
	close(out)
	require.Equal(t, setsBefore+1, sentinel.CoSets(c), "one set statement for the queued completions")
	for o := range out {
		switch o.key {
		case "stolen":
			require.ErrorIs(t, o.err, sentinel.ErrUncertain, o.key)
			require.Equal(t, 1, e.count("events", "key = 'stolen' AND event = 'completion_refused'"))
			require.Equal(t, 1, e.count("executions", "key = 'stolen' AND state = 'executing'"), "not completed")
		default:
			require.NoError(t, o.err, o.key)
			require.Equal(t, "result of "+o.key, o.res.Value)
			require.Equal(t, 1, e.count("executions", "key = $1 AND state = 'completed'", o.key))
			require.Equal(t, 1, e.count("events", "key = $1 AND event = 'completed'", o.key))
		}
	}
	select {
	case w := <-waited:
		require.NoError(t, w.err)
		require.True(t, w.res.Cached)
		require.Equal(t, "result of watched", w.res.Value)
		require.Less(t, time.Since(start), 5*time.Second, "woken by the batch's notification")
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter missed the batch's notification")
	}
}

// Replays queued behind a busy claim lane go out as one set statement
// (Once's first statement is its claim, which reads a completed key and
// writes nothing), calls on one key included, and each caller replays its
// own key; a key without a row is claimed and run.
func TestCoalescedReplaysShareAStatement(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, _ := coalescingClient(t, e, nil)
	// Completed by another client: c does not remember them as completed,
	// so its replays send the claim (replayhint.go).
	other := e.client(nil)
	for i := range 3 {
		_, err := sentinel.Once(ctx, other, fmt.Sprintf("done-%d", i), func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	type outcome struct {
		key string
		res sentinel.Result[int]
		err error
	}
	out := make(chan outcome, 10)
	var wg sync.WaitGroup
	call := func(key string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 42, nil })
			out <- outcome{key, res, err}
		}()
	}
	for _, k := range []string{"done-0", "done-1", "done-2", "done-0", "done-0", "absent"} {
		call(k)
	}
	waitQueued(t, queued, sentinel.CoClaim, 6)
	setsBefore := sentinel.CoSets(c)
	release()
	wg.Wait()
	close(out)
	require.GreaterOrEqual(t, sentinel.CoSets(c), setsBefore+1)
	for o := range out {
		require.NoError(t, o.err, o.key)
		if o.key == "absent" {
			require.False(t, o.res.Cached)
			require.Equal(t, 42, o.res.Value)
			continue
		}
		require.True(t, o.res.Cached, o.key)
		var i int
		_, err := fmt.Sscanf(o.key, "done-%d", &i)
		require.NoError(t, err)
		require.Equal(t, i, o.res.Value, o.key)
	}
}

// Two claims on one fresh key queued together share a set statement, which
// lets only the first insert the key: the second finds no row, claims
// again and finds the key taken. fn runs once.
func TestCoalescedClaimsOnOneKeyGoInTurn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, _ := coalescingClient(t, e, nil)
	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	var runs atomic.Int32
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := sentinel.Once(ctx, c, "dup", func(context.Context) (string, error) {
				runs.Add(1)
				return "once", nil
			})
			errs <- err
		}()
	}
	waitQueued(t, queued, sentinel.CoClaim, 2)
	release()
	for range 2 {
		if err := <-errs; err != nil {
			require.ErrorIs(t, err, sentinel.ErrInProgress)
		}
	}
	require.Equal(t, int32(1), runs.Load(), "fn ran once")
	require.Equal(t, 1, e.count("events", "key = 'dup' AND event = 'claimed'"))
}

// The plan settings sent with a set statement hold for its transaction
// only: the connection goes back to the pool as it was.
func TestSetPlanSettingsEndWithTheStatement(t *testing.T) {
	ctx := ctxT(t)
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(sentinel.SetPlanSQL)
	b.Queue("SELECT pg_catalog.current_setting('enable_seqscan'), pg_catalog.current_setting('enable_hashjoin')")
	br := conn.SendBatch(ctx, b)
	_, err = br.Exec()
	require.NoError(t, err)
	var seq, hash string
	require.NoError(t, br.QueryRow().Scan(&seq, &hash))
	require.NoError(t, br.Close())
	require.Equal(t, "off", seq, "in the set statement's transaction")
	require.Equal(t, "off", hash)
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('enable_seqscan'), pg_catalog.current_setting('enable_hashjoin')").Scan(&seq, &hash))
	require.Equal(t, "on", seq, "after it")
	require.Equal(t, "on", hash)
}

// Every set statement finds its calls' rows by primary key, planned as a
// generic plan against tables never analyzed (PostgreSQL assumes 10 pages)
// and against tables analyzed with many open executions and held leases:
// no sequential scan of a table, which a cached plan would keep doing
// while the table grew, and no scan of a secondary index (the claim's
// "claimed and expired" test once read every open execution through
// executions_open_idx).
func TestSetStatementsUseTheKeys(t *testing.T) {
	for _, analyzed := range []bool{false, true} {
		t.Run(fmt.Sprintf("analyzed=%v", analyzed), func(t *testing.T) { testSetStatementsUseTheKeys(t, analyzed) })
	}
}

func testSetStatementsUseTheKeys(t *testing.T, analyzed bool) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	if analyzed {
		s := pgx.Identifier{e.schema}.Sanitize()
		for _, q := range []string{
			`INSERT INTO ` + s + `.executions (namespace, key, state, owner, token, created_at, updated_at, lease_expires_at, hard_expires_at)
			 SELECT 'default', 'open' || g, 'claimed', 'o', g, pg_catalog.now(), pg_catalog.now(), pg_catalog.now() - interval '1 hour', pg_catalog.now() + interval '1 hour'
			 FROM pg_catalog.generate_series(1, 2000) g`,
			`INSERT INTO ` + s + `.executions (namespace, key, state, owner, token, created_at, updated_at, completed_at)
			 SELECT 'default', 'done' || g, 'completed', 'o', g, pg_catalog.now(), pg_catalog.now(), pg_catalog.now()
			 FROM pg_catalog.generate_series(1, 20000) g`,
			`INSERT INTO ` + s + `.leases (namespace, key, owner, token, acquired_at, renewed_at, expires_at, hard_expires_at)
			 SELECT 'default', 'held' || g, 'o', g, pg_catalog.now(), pg_catalog.now(), pg_catalog.now() + interval '1 hour', pg_catalog.now() + interval '1 hour'
			 FROM pg_catalog.generate_series(1, 20000) g`,
			`ANALYZE ` + s + `.executions`,
			`ANALYZE ` + s + `.leases`,
		} {
			_, err := admin.Exec(ctx, q)
			require.NoError(t, err, q)
		}
	}
	const n = 32
	same := func(v string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = v
		}
		return out
	}
	keys := make([]string, n)
	ints := make([]int64, n)
	for i := range keys {
		keys[i], ints[i] = fmt.Sprintf("k%d", i), int64(i+1)
	}
	bools, nulls, bytes := make([]bool, n), make([]*string, n), make([][]byte, n)
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for name, q := range map[string]struct {
		kind int
		args []any
	}{
		"claim":   {sentinel.CoClaim, []any{same("default"), keys, same("executing"), same("o"), same("h"), ints, ints, ints, nulls, ints, ints}},
		"finish":  {sentinel.CoFinish, []any{same("default"), keys, same("o"), ints, same("completed"), bytes, nulls, same("executing"), bools, same("completed"), nulls, nulls}},
		"read":    {sentinel.CoRead, []any{same("default"), keys}},
		"acquire": {sentinel.CoAcquire, []any{same("default"), keys, same("o"), same("h"), ints, ints, ints, bools, ints}},
		"release": {sentinel.CoRelease, []any{same("default"), keys, same("o"), ints}},
	} {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, sentinel.SetPlanSQL)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "PREPARE set_"+name+" AS "+sentinel.SetSQL(c, q.kind))
		require.NoError(t, err)
		// A generic plan does not depend on the values: NULL will do.
		rows, err := tx.Query(ctx, "EXPLAIN EXECUTE set_"+name+"("+strings.TrimSuffix(strings.Repeat("NULL, ", len(q.args)), ", ")+")")
		require.NoError(t, err)
		var plan strings.Builder
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		require.NoError(t, tx.Rollback(ctx))
		_, err = conn.Exec(ctx, "DEALLOCATE set_"+name)
		require.NoError(t, err)
		// Each scan of a table is an index probe on (namespace, key).
		lines := strings.Split(plan.String(), "\n")
		for i, line := range lines {
			for _, table := range []string{"executions", "leases"} {
				if !strings.Contains(line, " on "+table+" ") || !strings.Contains(line, "Scan") {
					continue
				}
				probe := regexp.MustCompile(`Index (Only )?Scan using \w+ on `+table+` `).MatchString(line) &&
					i+1 < len(lines) && strings.Contains(lines[i+1], "Index Cond: ((namespace = ") &&
					strings.Contains(lines[i+1], "AND (key = ")
				require.True(t, probe, "%s reads %s other than by probing (namespace, key): %s\n%s", name, table, strings.TrimSpace(line), plan.String())
			}
		}
	}
}
