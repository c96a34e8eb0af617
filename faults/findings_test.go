package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/lockmodel"
)

// Defects of the library found by the fault scenarios, each reduced to a
// small deterministic test. Each failed before its fix (commits 4171fbb and
// 30f453c) and now guards against a regression; see docs/reliability.md
// ("Findings").

// Behind PgBouncer < 1.21 in transaction pooling mode, pgx must not use
// named prepared statements: QueryExecModeExec or
// QueryExecModeSimpleProtocol. Every operation must work in both.
func TestQueryExecModesWithoutPreparedStatements(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	for name, mode := range map[string]pgx.QueryExecMode{
		"exec":   pgx.QueryExecModeExec,
		"simple": pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(name, func(t *testing.T) {
			pool := newPool(t, cl.URL(), func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			c := newClient(t, pool, sentinel.Config{DefaultTTL: time.Second, DisableListen: true, Owner: name})
			k := func(s string) string { return name + "-" + s }
			fn := func(v int) func(context.Context) (int, error) {
				return func(context.Context) (int, error) { return v, nil }
			}

			res, err := sentinel.Once(ctx, c, k("fresh"), fn(1))
			require.NoError(t, err, "fresh Once")
			require.False(t, res.Cached)
			res, err = sentinel.Once(ctx, c, k("fresh"), fn(2))
			require.NoError(t, err, "replay")
			require.True(t, res.Cached)
			require.Equal(t, 1, res.Value)

			_, err = sentinel.OnceTx(ctx, c, k("tx"), func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, `INSERT INTO side_effects (key, token, digest, worker) VALUES ($1, 0, '', '')`, k("tx"))
				return 3, err
			})
			require.NoError(t, err, "OnceTx")

			_, err = sentinel.Once(ctx, c, k("retry"), func(context.Context) (int, error) {
				return 0, sentinel.Retryable(errors.New("nothing happened"))
			})
			require.Error(t, err)
			res, err = sentinel.Once(ctx, c, k("retry"), fn(4))
			require.NoError(t, err, "Once after a retryable failure")
			require.False(t, res.Cached)

			_, err = sentinel.Once(ctx, c, k("verify"), func(ctx context.Context) (int, error) {
				tok, _ := sentinel.TokenFromContext(ctx)
				return 5, c.VerifyExecutionToken(ctx, pool, k("verify"), tok)
			})
			require.NoError(t, err, "VerifyExecutionToken inside fn")

			for i, resolve := range []string{"force", "reset"} {
				key := k("uncertain-" + resolve)
				_, err = sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 0, errors.New("boom") })
				require.ErrorIs(t, err, sentinel.ErrUncertain)
				_, err = c.Reconcile(ctx, key)
				require.NoError(t, err, "Reconcile")
				if resolve == "force" {
					require.NoError(t, c.ForceComplete(ctx, key, 6+i), "ForceComplete")
				} else {
					require.NoError(t, c.ResetToClaimed(ctx, key), "ResetToClaimed")
				}
				_, err = sentinel.Once(ctx, c, key, fn(6+i))
				require.NoError(t, err, "Once after %s", resolve)
			}
			_, err = c.History(ctx, k("fresh"))
			require.NoError(t, err, "History")

			l, err := c.Lease(ctx, k("lease"))
			require.NoError(t, err, "Lease")
			require.NoError(t, l.Heartbeat(ctx), "Heartbeat")
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, c.VerifyToken(ctx, tx, k("lease"), l.Token()), "VerifyToken")
			require.NoError(t, tx.Rollback(ctx))
			_, err = c.Holder(ctx, k("lease"))
			require.NoError(t, err, "Holder")
			require.NoError(t, l.Release(ctx), "Release")
			// A turn's release is a three-statement batch (issue 17.4).
			tn, err := c.Turn(ctx, k("turn"))
			require.NoError(t, err, "Turn")
			require.NoError(t, tn.Release(ctx), "Turn.Release")
			_, err = c.Prune(ctx, time.Hour)
			require.NoError(t, err, "Prune")
		})
	}
}

// A fencing token must be larger than every token granted before it. The
// acquire statement mints the token in its VALUES list, before the
// conflict check, and keeps it (token = excluded.token) when it takes over
// an expired row. An acquire delayed between the two steps (preempted, or
// waiting for an index page) can therefore be granted after a later,
// larger grant, with a smaller token. A trigger on the test schema that
// waits on an advisory lock reproduces that delay deterministically.
//
// Consequence: a resource guarded by `WHERE fence_token < $token` accepts a
// write from the stale holder (larger token) after the current holder's
// write.
func TestTokenMintedBeforeTheConflictCheck(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	_, err := admin.Exec(ctx, `
		CREATE FUNCTION faults_delay_grant() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.owner = 'delayed' THEN PERFORM pg_advisory_xact_lock(4242); END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER faults_delay BEFORE INSERT ON sentinel.leases
			FOR EACH ROW EXECUTE FUNCTION faults_delay_grant();
		INSERT INTO fenced (key) VALUES ('account'), ('ledger');`)
	require.NoError(t, err)
	x := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: time.Second, Owner: "delayed"})
	y := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: time.Second, Owner: "prompt"})
	rec := lockmodel.NewRecorder()

	gate, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer gate.Release()
	_, err = gate.Exec(ctx, `SELECT pg_advisory_lock(4242)`)
	require.NoError(t, err)

	// X asks first; its statement mints a token, then stalls.
	type result struct {
		l   *sentinel.Lease
		err error
		at  int64
	}
	xCall := rec.Now()
	xres := make(chan result, 1)
	go func() {
		l, err := x.Lease(ctx, "k")
		xres <- result{l, err, rec.Now()}
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		_ = admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)`).Scan(&waiting)
		return waiting
	}, 10*time.Second, 5*time.Millisecond)

	// Y asks later and is granted a larger token; it writes under it, and
	// its lease ends (hard TTL) without a release.
	yCall := rec.Now()
	ly, err := y.Lease(ctx, "k", sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.NoError(t, err)
	rec.Add(lockmodel.Input{Kind: lockmodel.Acquire, Key: "k", Client: 1}, yCall, lockmodel.Output{Result: lockmodel.OK, Token: ly.Token()}, rec.Now())
	require.Equal(t, "ok", fencedWrite(ctx, admin, "account", ly.Token(), "prompt"))
	<-ly.Done()
	time.Sleep(100 * time.Millisecond) // past its expiry on the database clock too

	// X's statement resumes. Since issue 17.2 a row inserted concurrently
	// is left to its inserter (ON CONFLICT DO NOTHING: a takeover only
	// goes through the FOR UPDATE lock), so X is told the key is held and
	// asks again; before, it took the expired row over. Either way its
	// grant must carry a token larger than Y's.
	_, err = gate.Exec(ctx, `SELECT pg_advisory_unlock(4242)`)
	require.NoError(t, err)
	xr := <-xres
	if errors.Is(xr.err, sentinel.ErrNotAcquired) {
		rec.Add(lockmodel.Input{Kind: lockmodel.Acquire, Key: "k", Client: 0}, xCall, lockmodel.Output{Result: lockmodel.Refused}, xr.at)
		xCall = rec.Now()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		xr.l, xr.err = x.Lease(wctx, "k", sentinel.WithWait())
		cancel()
		xr.at = rec.Now()
	}
	require.NoError(t, xr.err)
	lx := xr.l
	defer func() { _ = lx.Release(ctx) }()
	rec.Add(lockmodel.Input{Kind: lockmodel.Acquire, Key: "k", Client: 0}, xCall, lockmodel.Output{Result: lockmodel.OK, Token: lx.Token()}, xr.at)
	wCall := rec.Now()
	w := guardedWrite(ctx, admin, x, "k", lx.Token(), "delayed", nil)
	rec.Add(lockmodel.Input{Kind: lockmodel.Write, Key: "k", Client: 0, Token: lx.Token()}, wCall, lockmodel.Output{Result: lockmodel.OK}, rec.Now())
	require.Equal(t, "ok", w, "X holds the lease now: its guarded write is accepted")

	// The current holder X writes the ledger; then the stale Y's delayed
	// write arrives with its larger token.
	xWrite := fencedWrite(ctx, admin, "ledger", lx.Token(), "delayed")
	yStale := fencedWrite(ctx, admin, "ledger", ly.Token(), "prompt")
	check := lockmodel.Check(rec.History(), 10*time.Second)

	require.Greater(t, lx.Token(), ly.Token(),
		"token %d granted after token %d: tokens went backwards (the current holder's write to ledger: %s; "+
			"the stale holder's later write with its larger token: %s; porcupine: %s)", lx.Token(), ly.Token(), xWrite, yStale, check)
	require.Equal(t, porcupine.Ok, check)
}

// A Release that fails (the server is unreachable for a moment) keeps the
// lease held and renewed for as long as the client lives, so with the
// usual `defer lease.Release(ctx)` nobody else gets the key again. After a
// failed Release the lease should stop being renewed and expire.
func TestFailedReleaseDoesNotKeepTheLeaseAlive(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	const ttl = 2 * time.Second
	a := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: ttl, Owner: "a"})
	b := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: ttl, Owner: "b"})
	l, err := a.Lease(ctx, "k")
	require.NoError(t, err)

	require.NoError(t, cl.Stop(ctx, "fast"))
	rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = l.Release(rctx)
	cancel()
	require.Error(t, err, "Release with the server down")
	require.NoError(t, cl.Start(ctx))

	time.Sleep(3 * ttl)
	lb, err := b.Lease(ctx, "k")
	if err == nil {
		_ = lb.Release(ctx)
	}
	require.NoError(t, err, "%s after a failed Release: the released lease is still renewed (Err %v)", 3*ttl, l.Err())
}

// After waiting on the lease row's lock (a holder's VerifyToken
// transaction) for longer than the TTL, an acquire is granted a lease that
// has already expired: its expiry counts from the statement's start. Lease
// returns it as a success; its Done closes at once. (Since issue 17.2 the
// guard no longer blocks the holder's renewals, so the holder releases
// instead of expiring: the grant still waits for the guard.)
func TestGrantAfterALockWaitIsNotBornExpired(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	const ttl = time.Second
	a := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: ttl, Owner: "a"})
	b := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{DefaultTTL: ttl, Owner: "b"})
	la, err := a.Lease(ctx, "k")
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, a.VerifyToken(ctx, tx, "k", la.Token()))

	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := b.Lease(ctx, "k", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	// a releases meanwhile: its release does not wait for its own guard,
	// but no grant to b may commit while the guard's transaction is open.
	require.NoError(t, la.Release(ctx))
	select {
	case <-got:
		t.Fatal("b was granted the lease while a's guarded transaction was open")
	case <-time.After(2 * ttl):
	}
	require.NoError(t, tx.Commit(ctx))
	lb := <-got
	require.NotNil(t, lb)
	defer func() { _ = lb.Release(ctx) }()
	left := time.Until(lb.Deadline())
	require.Greater(t, left, ttl/2, "a lease granted just now is trusted for %s of its %s TTL (Err %v)", left, ttl, lb.Err())
}

// A non-blocking Lease must answer at once: while the holder runs a
// guarded transaction (VerifyToken locks the lease row FOR KEY SHARE), another
// client's Lease on that key blocks until the transaction ends, instead of
// reporting ErrNotAcquired. A paused or partitioned holder inside such a
// transaction blocks every acquirer, non-blocking ones included, until its
// session dies.
func TestNonBlockingLeaseDoesNotWaitForAGuardedTransaction(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	a := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{Owner: "a"})
	b := newClient(t, newPool(t, cl.URL(), nil), sentinel.Config{Owner: "b"})
	la, err := a.Lease(ctx, "k")
	require.NoError(t, err)
	defer func() { _ = la.Release(ctx) }()
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, a.VerifyToken(ctx, tx, "k", la.Token()))

	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err = b.Lease(bctx, "k")
	took := time.Since(start)
	require.ErrorIs(t, err, sentinel.ErrNotAcquired, "after %s", took)
	require.Less(t, took, 500*time.Millisecond, fmt.Sprintf("a non-blocking Lease took %s", took))
}
