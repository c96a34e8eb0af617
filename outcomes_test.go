package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

var errDeclined = errors.New("card declined: insufficient funds")

// Issue 9, item 3: a Final outcome completes the key; it is replayed to
// every later caller as ErrFinal with the message, and fn never runs again.
func TestFinalOutcomeIsStoredAndReplayed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var runs atomic.Int32
	charge := func(context.Context) (string, error) {
		runs.Add(1)
		return "decline-ref-7", sentinel.Final(errDeclined)
	}
	res, err := sentinel.Once(ctx, e.client(nil), "pay-1", charge)
	require.ErrorIs(t, err, sentinel.ErrFinal)
	require.ErrorIs(t, err, errDeclined, "the first caller can reach fn's own error")
	require.Equal(t, errDeclined.Error(), err.Error())
	require.False(t, res.Cached)
	require.Equal(t, "decline-ref-7", res.Value)

	for range 3 {
		res, err = sentinel.Once(ctx, e.client(nil), "pay-1", charge)
		require.ErrorIs(t, err, sentinel.ErrFinal)
		var fe *sentinel.FinalError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, errDeclined.Error(), fe.Message)
		require.True(t, res.Cached)
		require.Equal(t, "decline-ref-7", res.Value)
	}
	require.EqualValues(t, 1, runs.Load())
	ex, err := e.client(nil).Inspect(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.Equal(t, errDeclined.Error(), ex.FinalError)

	// OnceTx: a Final outcome commits fn's writes with the completion.
	_, err = admin.Exec(ctx, "CREATE TABLE "+e.table("attempts")+" (key text)")
	require.NoError(t, err)
	_, err = sentinel.OnceTx(ctx, e.client(nil), "pay-2", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("attempts")+" VALUES ('pay-2')")
		require.NoError(t, err)
		return 0, sentinel.Final(errDeclined)
	})
	require.ErrorIs(t, err, sentinel.ErrFinal)
	require.Equal(t, 1, e.count("attempts", ""))
}

// Issue 9, item 4: 50 concurrent deliveries of one event with WithWait get
// one run and 49 cached results.
func TestOnceWaitFiftyCallersOneRun(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	clients := make([]*sentinel.Client, 5)
	for i := range clients {
		clients[i] = e.client(nil)
	}
	var runs atomic.Int32
	var wg sync.WaitGroup
	var cached atomic.Int32
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sentinel.Once(ctx, clients[i%5], "evt-1", func(context.Context) (string, error) {
				runs.Add(1)
				time.Sleep(500 * time.Millisecond)
				return "receipt-1", nil
			}, sentinel.WithWait())
			if !assertNoErr(t, err) {
				return
			}
			if res.Value != "receipt-1" {
				t.Errorf("got %q", res.Value)
			}
			if res.Cached {
				cached.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 49, cached.Load())
}

func assertNoErr(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// A waiter returns at once when the key becomes uncertain (woken by the
// failing statement, not by its ctx), and its ctx bounds the wait.
func TestOnceWaitUncertainAndTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	started := make(chan struct{})
	release := make(chan struct{})
	go func() {
		_, _ = sentinel.Once(ctx, a, "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 0, errors.New("gateway exploded")
		}, sentinel.WithTTL(10*time.Second), sentinel.WithHardTTL(time.Minute))
	}()
	<-started
	// b's first statements (connecting, preparing) are made before the
	// bounded call, and the bound is long enough for its claim to answer
	// on a loaded machine: the wait, not the claim, is what it must end.
	_, err := sentinel.Once(ctx, b, "k", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrInProgress)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = sentinel.Once(short, b, "k", func(context.Context) (int, error) { return 1, nil }, sentinel.WithWait())
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, sentinel.ErrInProgress)

	got := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, b, "k", func(context.Context) (int, error) { return 1, nil }, sentinel.WithWait())
		got <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	close(release)
	require.ErrorIs(t, <-got, sentinel.ErrUncertain)
	require.Less(t, time.Since(start), 5*time.Second, "woken by the outcome, not the 10 s lease")
}

// Issue 9, item 1 (and the operator's path): fn succeeded but its lease
// ran out; the completion is refused, the key is uncertain, and the history
// carries fn's result so the operator can force-complete with it.
func TestCompletionRefusedLeavesEvidence(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	type receipt struct {
		ID     string `json:"id"`
		Amount int    `json:"amount"`
	}
	_, err := sentinel.Once(ctx, c, "slow-charge", func(ctx context.Context) (receipt, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+300ms
		<-ctx.Done()          // hard TTL = TTL: the lease ends at 300 ms (locally earlier, by the margin)
		// Return only once the hard TTL has certainly passed on the
		// database clock too (on a loaded machine the claim may commit
		// well after it was sent), so the completion is refused.
		time.Sleep(time.Until(started.Add(300*time.Millisecond + 200*time.Millisecond)))
		return receipt{"ch_42", 1999}, nil // the card was charged anyway
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Contains(t, err.Error(), "completion_refused")
	require.Contains(t, err.Error(), "ForceComplete")

	hist, err := c.History(ctx, "slow-charge")
	require.NoError(t, err)
	var refused *sentinel.Event
	for i := range hist {
		if hist[i].Type == "completion_refused" {
			refused = &hist[i]
		}
	}
	require.NotNil(t, refused, "history: %+v", hist)
	raw, err := json.Marshal(refused.Metadata["result"])
	require.NoError(t, err)
	var got receipt
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, receipt{"ch_42", 1999}, got)

	rec, err := c.Reconcile(ctx, "slow-charge")
	require.NoError(t, err)
	require.NoError(t, c.ForceComplete(ctx, "slow-charge", refused.Metadata["result"], sentinel.WithToken(rec.Token)))
	res, err := sentinel.Once(ctx, c, "slow-charge", func(context.Context) (receipt, error) {
		t.Fatal("must not run again")
		return receipt{}, nil
	})
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, receipt{"ch_42", 1999}, res.Value)
}

// Issue 9, item 2: Config.OnceHardTTL lets heartbeats carry fn past its TTL.
func TestOnceHardTTLConfig(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// fn outlives its TTL, renewed; a TTL of 300 ms lost its renewals
	// under load (CI), so a TTL of a second, and fn twice as long.
	c := e.client(&sentinel.Config{DefaultTTL: time.Second, OnceHardTTL: 10 * time.Second})
	res, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) {
		time.Sleep(2500 * time.Millisecond)
		return 7, nil
	})
	require.NoError(t, err)
	require.Equal(t, 7, res.Value)
	_, err = sentinel.New(admin, &sentinel.Config{OnceHardTTL: -time.Second})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
}

// Issue 8, item 12: a Retryable error after an operator reconciled the key
// says the key is reconciling (it was not released for the next caller).
func TestRetryableAfterReconcileSaysReconciling(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	worker, operator := e.client(nil), e.client(nil)
	fnErr := errors.New("gateway timeout before sending")
	_, err := sentinel.Once(ctx, worker, "k", func(ctx context.Context) (int, error) {
		<-ctx.Done() // the lease ends at its hard TTL
		require.Eventually(t, func() bool {
			_, err := operator.Reconcile(context.Background(), "k")
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
		return 0, sentinel.Retryable(fnErr)
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrReconciling)
	// Not "try again": IsRetryable said true here, and the HTTP recipe
	// (docs/once.md), which asks it first, answered 503 for a key under
	// review. fn's own error is still reachable.
	require.False(t, sentinel.IsRetryable(err), "%v", err)
	require.ErrorIs(t, err, fnErr)
	ex, err := operator.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)
}

// Issue 8, item 8: an OnceTx fn that commits the transaction itself leaves
// the key uncertain instead of freeing it for a second run.
func TestOnceTxFnThatCommitsLeavesUncertain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	c := e.client(nil)
	fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" VALUES ('k')"); err != nil {
			return 0, err
		}
		return 1, tx.Commit(ctx)
	}
	_, err = sentinel.OnceTx(ctx, c, "k", fn)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Contains(t, err.Error(), "committed or rolled back the transaction itself")
	_, err = sentinel.OnceTx(ctx, c, "k", fn)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Equal(t, 1, e.count("ledger", ""), "fn's write happened once")
}

// Issue 8, item 9: the commit's reply is lost (the server committed): the
// call reads the row back on a fresh context and reports success.
func TestOnceTxLostCommitReplyIsSuccess(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	px := newFreezeProxy(t, dbURL)
	pool := e.pool(func(c *pgxpool.Config) {
		px.route(c)
		c.MaxConns = 2 // the read-back needs a connection of its own
	})
	// Both connections are made before the commit is cut, and the bound
	// leaves the read-back time to answer on a loaded machine: with a
	// 500 ms bound, a read-back that had to connect first timed out too.
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c1.Release()
	c2.Release()
	c := e.clientOn(pool, &sentinel.Config{ReleaseTimeout: 2 * time.Second})
	px.armAfter("commit")
	res, err := sentinel.OnceTx(ctx, c, "k", func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" VALUES ('k')")
		return "booked", err
	})
	require.True(t, px.frozen(), "the commit's reply was not cut")
	require.NoError(t, err)
	require.Equal(t, "booked", res.Value)
	require.Equal(t, 1, e.count("ledger", ""))
	ex, err := e.client(nil).Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
}

// Issue 8, item 14: a key completed without a storable result can be given
// one by an operator; a result fn stored can never be overwritten that way.
func TestSetResultRepairsAnUnencodableResult(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "k", func(context.Context) (func(), error) { return func() {}, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.Contains(t, err.Error(), "SetResult")
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (string, error) { return "x", nil })
	require.ErrorIs(t, err, sentinel.ErrResult)

	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.ErrorIs(t, c.SetResult(ctx, "k", "receipt-9", sentinel.WithToken(ex.Token+1)), sentinel.ErrWrongState)
	require.NoError(t, c.SetResult(ctx, "k", "receipt-9", sentinel.WithToken(ex.Token), sentinel.WithMetadata(map[string]any{"by": "alice"})))
	res, err := sentinel.Once(ctx, c, "k", func(context.Context) (string, error) { return "x", nil })
	require.NoError(t, err)
	require.Equal(t, "receipt-9", res.Value)
	// An operator's result may be replaced by an operator (issue 25.3); a
	// result fn stored never is.
	require.NoError(t, c.SetResult(ctx, "k", "receipt-10"))
	_, err = sentinel.Once(ctx, c, "fn-stored", func(context.Context) (string, error) { return "x", nil })
	require.NoError(t, err)
	require.ErrorIs(t, c.SetResult(ctx, "fn-stored", "other"), sentinel.ErrWrongState, "a result fn stored is never overwritten")
	require.ErrorIs(t, c.SetResult(ctx, "nope", "x"), sentinel.ErrNotFound)
	hist, err := c.History(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "result_set", hist[len(hist)-1].Type)
}

// Issue 8, item 13: after an admin migrated, the library runs under a role
// that may only read and write Sentinel's tables (docs/operating.md's grants),
// Migrate included.
func TestDMLOnlyRole(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	role := "sentinel_app_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	schema := pgx.Identifier{e.schema}.Sanitize()
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + schema + " TO " + role,
	} {
		_, err := admin.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	cfg.ConnConfig.User = role
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer p.Close()
	c := e.clientOn(p, nil)
	require.NoError(t, c.Migrate(ctx), "nothing pending: Migrate must not need CREATE")
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Heartbeat(ctx))
	require.NoError(t, l.Release(ctx))
	_, err = sentinel.Once(ctx, c, "o", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, c, "bad", func(context.Context) (int, error) { return 0, errors.New("x") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	rec, err := c.Reconcile(ctx, "bad")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctx, "bad", sentinel.WithToken(rec.Token)))
	_, err = c.Prune(ctx, time.Hour)
	require.NoError(t, err)

	tx, err := p.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.ErrorIs(t, sentinel.MigrateTx(ctx, tx, ""), sentinel.ErrInvalid)
}

// Issue 9, item 10: a schema that was never migrated says to migrate.
func TestNotMigratedSaysWhatToDo(t *testing.T) {
	ctx := ctxT(t)
	c, err := sentinel.New(admin, &sentinel.Config{Schema: "never_migrated_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Lease(ctx, "k")
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
	require.Contains(t, err.Error(), "Migrate")
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
	_, err = c.Inspect(ctx, "k")
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
}

// Issue 9, items 9 and 12: bad input and the messages a user reads.
func TestBadTTLsAndHonestMessages(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for _, opt := range []sentinel.Option{sentinel.WithTTL(0), sentinel.WithTTL(-time.Second), sentinel.WithTTL(time.Millisecond),
		sentinel.WithHardTTL(0), sentinel.WithHardTTL(-1)} {
		_, err := c.Lease(ctx, "k", opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid)
		_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil }, opt)
		require.ErrorIs(t, err, sentinel.ErrInvalid)
	}
	require.Zero(t, e.count("leases", ""))
	require.Zero(t, e.count("executions", ""))
	_, err := sentinel.New(admin, &sentinel.Config{DefaultTTL: 10 * time.Millisecond})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	var nilCtx context.Context // a nil ctx is the point
	_, err = sentinel.Once(nilCtx, c, "k", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrInvalid)

	// Acquiring a key this client holds names this client.
	l, err := c.Lease(ctx, "mine")
	require.NoError(t, err)
	_, err = c.Lease(ctx, "mine")
	var held *sentinel.HeldError
	require.ErrorAs(t, err, &held)
	require.True(t, held.Self)
	require.Contains(t, err.Error(), "held by this client")
	require.Contains(t, err.Error(), "not re-entrant")

	// A forced takeover: the old holder's error does not claim "current 0".
	other := e.client(nil)
	l2, err := other.Lease(ctx, "mine", sentinel.WithForce())
	require.NoError(t, err)
	err = l.Heartbeat(ctx)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	require.NotContains(t, l.Err().Error(), "current 0")
	require.NoError(t, l2.Release(ctx))

	// Operator errors name the method, not an internal event.
	_, err = sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "done")
	require.ErrorIs(t, err, sentinel.ErrWrongState)
	require.Contains(t, err.Error(), "Reconcile requires state executing")
	err = c.ForceComplete(ctx, "done", 2)
	require.Contains(t, err.Error(), "ForceComplete requires state reconciling")
	require.NotContains(t, err.Error(), "force_completed")
}

// Issue 17.3: with every default, a healthy fn that runs for several TTLs
// completes. The hard TTL used to default to the TTL, so a call longer
// than its TTL was refused and the key left uncertain although its process
// was healthy and heartbeating.
func TestOnceDefaultHardTTLLetsSlowWorkComplete(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// A TTL of 2s leaves a renewal about 1.1s to land before the local
	// deadline; with 0.5s (0.28s), and once with 1s (0.57s), a renewal
	// stalled by a loaded CI machine lost the lease.
	const ttl = 2 * time.Second
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	res, err := sentinel.Once(ctx, c, "slow", func(context.Context) (string, error) {
		time.Sleep(5 * ttl / 2) // two and a half TTLs
		return "charged", nil
	})
	require.NoError(t, err)
	require.Equal(t, sentinel.DefaultOnceHardTTL, c.Config().OnceHardTTL)
	require.Equal(t, "charged", res.Value)
	ex, err := c.Inspect(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)

	// OnceTx too.
	tx, err := sentinel.OnceTx(ctx, c, "slow-tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		time.Sleep(5 * ttl / 2)
		return 1, nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, tx.Value)

	// The original rule is one setting away: a value below the TTL counts
	// as the TTL, so heartbeats cannot carry fn past it.
	strict := e.client(&sentinel.Config{DefaultTTL: 500 * time.Millisecond, OnceHardTTL: sentinel.MinTTL})
	_, err = sentinel.Once(ctx, strict, "strict", func(ctx context.Context) (int, error) {
		started := time.Now() // after the claim: its hard TTL (= TTL) ends before started+500ms
		<-ctx.Done()          // the hard TTL ends the lease (locally earlier, by the margin)
		// fn finishes only once the database expiry has certainly passed
		// too (on a loaded machine the claim may commit well after it was
		// sent, and its expiry counts from then).
		time.Sleep(time.Until(started.Add(500*time.Millisecond + 200*time.Millisecond)))
		return 1, nil
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
}

// Config.ReleaseTimeout bounds the completion that follows fn. New took any
// positive value: with 1ms (even against a local server) every Once whose fn
// succeeded had its completion cut off and left the key uncertain for an
// operator, and every OnceTx too. Below MinTTL it is refused, as a TTL is.
func TestConfigReleaseTimeoutBelowMinTTLIsRefused(t *testing.T) {
	e := newEnv(t)
	p := e.pool(nil)
	for _, rt := range []time.Duration{time.Nanosecond, time.Millisecond, sentinel.MinTTL - 1} {
		_, err := sentinel.New(p, &sentinel.Config{Schema: e.schema, ReleaseTimeout: rt})
		require.ErrorIs(t, err, sentinel.ErrInvalid, "ReleaseTimeout %s", rt)
		var ie *sentinel.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "ReleaseTimeout", ie.Field)
	}
	c := e.clientOn(p, &sentinel.Config{ReleaseTimeout: sentinel.MinTTL})
	r, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, r.Value)
}
