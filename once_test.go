package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func TestOnceFreshThenCached(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var runs atomic.Int32
	charge := func(ctx context.Context) (receipt, error) {
		runs.Add(1)
		tok, ok := sentinel.TokenFromContext(ctx)
		require.True(t, ok)
		require.Positive(t, tok)
		return receipt{ID: "pay_1", Amount: 9900}, nil
	}
	res, err := sentinel.Once(ctx, c, "payment-order-789", charge)
	require.NoError(t, err)
	require.False(t, res.Cached)
	require.Equal(t, receipt{"pay_1", 9900}, res.Value)

	again, err := sentinel.Once(ctx, e.client(nil), "payment-order-789", charge)
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, res.Value, again.Value)
	require.Equal(t, res.Token, again.Token)
	require.EqualValues(t, 1, runs.Load())

	ex, err := c.Inspect(ctx, "payment-order-789")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.JSONEq(t, `{"id":"pay_1","amount":9900}`, string(ex.Result))

	hist, err := c.History(ctx, "payment-order-789")
	require.NoError(t, err)
	var names []string
	for _, ev := range hist {
		names = append(names, ev.Type)
		require.Equal(t, res.Token, ev.Token)
	}
	require.Equal(t, []string{"claimed", "started", "completed"}, names)
	require.Equal(t, 3, e.count("events", ""), "the replay wrote nothing")
}

// 64 goroutines on one key: fn runs once; the rest get the cached value or
// in-progress.
func TestOnceConcurrentCallersRunOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	p := e.pool(nil)
	var runs atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	var cached, inProgress, fresh atomic.Int32
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.clientOn(p, nil)
			<-start
			res, err := sentinel.Once(ctx, c, "hot", func(ctx context.Context) (int, error) {
				runs.Add(1)
				time.Sleep(20 * time.Millisecond)
				return 42, nil
			})
			switch {
			case err == nil && res.Cached:
				require.Equal(t, 42, res.Value)
				cached.Add(1)
			case err == nil:
				fresh.Add(1)
			case errors.Is(err, sentinel.ErrInProgress):
				var ee *sentinel.ExecutionError
				require.ErrorAs(t, err, &ee)
				require.NotEmpty(t, ee.Owner)
				inProgress.Add(1)
			default:
				t.Errorf("unexpected: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	require.EqualValues(t, 1, fresh.Load())
	require.EqualValues(t, 63, cached.Load()+inProgress.Load())
}

func TestOnceStatementCounts(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	e.stmts.n.Store(0)
	_, err := sentinel.Once(ctx, c, "counted", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.EqualValues(t, 2, e.stmts.n.Load(), "fresh Once: claim, complete")
	e.stmts.n.Store(0)
	res, err := sentinel.Once(ctx, c, "counted", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.EqualValues(t, 1, e.stmts.n.Load(), "replay")
}

// With a hard TTL equal to the TTL nothing can extend an execution's
// lease, so the heartbeat leaves it alone: a fn that runs for
// more than one renewal interval still costs two statements, not two plus
// renewals that extend the expiry by the microseconds between two clock
// reads.
func TestOnceCappedLeaseIsNotRenewed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	e.stmts.n.Store(0)
	_, err := sentinel.Once(ctx, c, "capped", func(context.Context) (int, error) {
		time.Sleep(300 * time.Millisecond) // past the first renewal (200ms), well inside the TTL
		return 1, nil
	}, sentinel.WithTTL(600*time.Millisecond), sentinel.WithHardTTL(600*time.Millisecond))
	require.NoError(t, err)
	require.EqualValues(t, 2, e.stmts.n.Load(), "claim, complete; no renewals")

	// With room under the hard TTL the same call is renewed.
	e.stmts.n.Store(0)
	_, err = sentinel.Once(ctx, c, "renewed", func(context.Context) (int, error) {
		time.Sleep(300 * time.Millisecond)
		return 1, nil
	}, sentinel.WithTTL(600*time.Millisecond), sentinel.WithHardTTL(time.Minute))
	require.NoError(t, err)
	require.GreaterOrEqual(t, e.stmts.n.Load(), int64(3), "claim, renewals, complete")
}

func TestOnceNamespacesAreSeparateColumns(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	r1, err := sentinel.Once(ctx, c, "b:c", func(context.Context) (string, error) { return "first", nil }, sentinel.WithNamespace("a"))
	require.NoError(t, err)
	r2, err := sentinel.Once(ctx, c, "c", func(context.Context) (string, error) { return "second", nil }, sentinel.WithNamespace("a:b"))
	require.NoError(t, err)
	require.False(t, r2.Cached)
	require.Equal(t, "first", r1.Value)
	require.Equal(t, "second", r2.Value)
	require.Equal(t, 2, e.count("executions", ""))
	_, err = c.Inspect(ctx, "b:c") // default namespace: absent
	require.ErrorIs(t, err, sentinel.ErrNotFound)
}

func TestOnceRetryableLetsNextCallerRun(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	boom := errors.New("card network unreachable before charging")
	_, err := sentinel.Once(ctx, c, "retry-me", func(context.Context) (int, error) { return 0, sentinel.Retryable(boom) })
	require.ErrorIs(t, err, boom)
	require.True(t, sentinel.IsRetryable(err))
	ex, err := c.Inspect(ctx, "retry-me")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State)
	require.False(t, ex.LeaseAlive)

	res, err := sentinel.Once(ctx, e.client(nil), "retry-me", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.Equal(t, 7, res.Value)
	require.Greater(t, res.Token, ex.Token)
}

func TestOnceErrorLeavesUncertain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	boom := errors.New("timeout talking to the card network")
	_, err := sentinel.Once(ctx, c, "unsure", func(context.Context) (int, error) { return 0, boom })
	require.ErrorIs(t, err, boom)
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	ran := false
	_, err = sentinel.Once(ctx, e.client(nil), "unsure", func(context.Context) (int, error) { ran = true; return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, ran)
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, sentinel.StateExecuting, ee.State)
}

func TestOncePanicIsRecordedAndRepanicked(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	func() {
		defer func() { require.Equal(t, "kaboom", recover()) }()
		_, _ = sentinel.Once(ctx, c, "panics", func(context.Context) (int, error) { panic("kaboom") })
	}()
	_, err := sentinel.Once(ctx, c, "panics", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	hist, err := c.History(ctx, "panics")
	require.NoError(t, err)
	require.Equal(t, "failed", hist[len(hist)-1].Type)
	require.Equal(t, "panic: kaboom", hist[len(hist)-1].Metadata["error"])
}

func TestOnceContextCancelledIsUncertain(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	_, err := sentinel.Once(ctx, c, "cancelled", func(ctx context.Context) (int, error) {
		cancel()
		<-ctx.Done()
		return 0, ctx.Err()
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorIs(t, err, context.Canceled)
	ex, err := c.Inspect(ctxT(t), "cancelled")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State)
	require.False(t, ex.LeaseAlive, "the lease ends at once")
}

// The lease is lost while fn runs: fn's ctx is cancelled with the loss as
// cause, and its completion is refused by the guard.
func TestOnceLeaseLostWhileRunning(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 600 * time.Millisecond})
	inside, locked := make(chan struct{}), make(chan struct{})
	var tx pgx.Tx
	go func() {
		defer close(locked)
		<-inside
		var err error
		tx, err = admin.Begin(ctx)
		if err == nil { // block heartbeats on the row
			_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'lost' FOR UPDATE")
		}
		if err != nil {
			t.Error(err)
		}
	}()
	var cause error
	_, err := sentinel.Once(ctx, c, "lost", func(fctx context.Context) (int, error) {
		close(inside)
		<-fctx.Done()
		<-locked
		cause = context.Cause(fctx)
		// Let the database expiry pass too, then free the row.
		time.Sleep(400 * time.Millisecond)
		require.NoError(t, tx.Rollback(ctx))
		return 1, nil // a stale worker claiming success
	}, sentinel.WithHardTTL(time.Minute))
	require.ErrorIs(t, cause, sentinel.ErrLeaseLost)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Inspect(ctx, "lost")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State, "completion refused")
}

// The hard TTL cancels fn's ctx even with healthy heartbeats.
//
// The TTL and the margin are long enough for a loaded machine: with a
// 400 ms TTL a renewal that took over 300 ms ended the lease as lost
// ("renewal deadline passed") before the hard TTL, and with a 100 ms
// margin the check of the row below could run past the hard expiry.
func TestOnceHardTTL(t *testing.T) {
	e := newEnv(t)
	c := e.client(&sentinel.Config{SafetyMargin: 600 * time.Millisecond})
	start := time.Now()
	var cause error
	var ranFor time.Duration
	var beforeHard bool
	_, err := sentinel.Once(ctxT(t), c, "long", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		ranFor = time.Since(start)
		cause = context.Cause(ctx)
		require.NoError(t, admin.QueryRow(context.Background(), "SELECT hard_expires_at > clock_timestamp() FROM "+
			e.table("executions")+" WHERE key = 'long'").Scan(&beforeHard))
		return 0, ctx.Err()
	}, sentinel.WithTTL(2*time.Second), sentinel.WithHardTTL(5*time.Second))
	require.ErrorIs(t, cause, sentinel.ErrHardTTL)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.GreaterOrEqual(t, ranFor, 4*time.Second, "heartbeats extended it past the TTL")
	require.True(t, beforeHard, "cancelled before the hard TTL passed on the database clock")
}

// A worker killed inside fn: the key is uncertain and fn never runs again;
// Reconcile + ForceComplete gives the forced value as cached; on another key
// Reconcile + ResetToClaimed lets exactly one later call run.
func TestOnceKilledWorkerThenReconcile(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for _, key := range []string{"order-1", "order-2"} {
		killInside(t, e, "once", key)
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (string, error) { return "", nil })
		require.ErrorIs(t, err, sentinel.ErrInProgress, "lease alive right after the kill")
		waitLeaseExpired(t, c, key)
		ran := false
		_, err = sentinel.Once(ctx, c, key, func(context.Context) (string, error) { ran = true; return "x", nil })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.False(t, ran)
	}

	// order-1: the charge did happen.
	before := e.count("events", "")
	_, err := c.Reconcile(ctx, "order-1")
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "order-1") // not executing any more
	require.ErrorIs(t, err, sentinel.ErrWrongState)
	require.Equal(t, before+1, e.count("events", ""), "a refused step writes nothing")
	_, err = sentinel.Once(ctx, c, "order-1", func(context.Context) (string, error) { return "", nil })
	require.ErrorIs(t, err, sentinel.ErrReconciling)
	require.NoError(t, c.ForceComplete(ctx, "order-1", "pay_forced"))
	res, err := sentinel.Once(ctx, c, "order-1", func(context.Context) (string, error) { return "rerun", nil })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, "pay_forced", res.Value)

	// order-2: it did not; exactly one of many later callers runs it.
	rec, err := c.Reconcile(ctx, "order-2")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, rec.State)
	require.NoError(t, c.ResetToClaimed(ctx, "order-2"))
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sentinel.Once(ctx, c, "order-2", func(context.Context) (string, error) {
				runs.Add(1)
				time.Sleep(10 * time.Millisecond)
				return "pay_2", nil
			})
			if err != nil && !errors.Is(err, sentinel.ErrInProgress) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	ex, err := c.Inspect(ctx, "order-2")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.Greater(t, ex.Token, rec.Token)
}

func TestReconcilePreconditions(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := c.Reconcile(ctx, "nothing")
	require.ErrorIs(t, err, sentinel.ErrNotFound)
	_, err = sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	before := e.count("events", "")
	_, err = c.Reconcile(ctx, "done")
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, sentinel.StateCompleted, ee.State)
	require.ErrorIs(t, c.ForceComplete(ctx, "done", 2), sentinel.ErrWrongState)
	require.ErrorIs(t, c.ResetToClaimed(ctx, "done"), sentinel.ErrWrongState)
	require.Equal(t, before, e.count("events", ""))

	// An executing key with a live lease cannot be reconciled.
	inside, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = sentinel.Once(ctx, c, "busy", func(context.Context) (int, error) {
			close(inside)
			<-release
			return 1, nil
		}, sentinel.WithHardTTL(time.Minute))
	}()
	<-inside
	_, err = c.Reconcile(ctx, "busy")
	require.ErrorIs(t, err, sentinel.ErrWrongState)
	require.Contains(t, err.Error(), "lease is alive")
	close(release)
}

type unencodable struct{ C chan int }

func TestOnceEncodingFailureStillCompletes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	res, err := sentinel.Once(ctx, c, "odd", func(context.Context) (unencodable, error) { return unencodable{C: make(chan int)}, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.NotNil(t, res.Value.C, "the value is still returned")
	ex, err := c.Inspect(ctx, "odd")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State, "never left executing")
	require.NotEmpty(t, ex.ResultError)
	ran := false
	_, err = sentinel.Once(ctx, c, "odd", func(context.Context) (unencodable, error) { ran = true; return unencodable{}, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.False(t, ran)
}

func TestOnceLargeResult(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	big := strings.Repeat("x", 2<<20)
	_, err := sentinel.Once(ctx, c, "big", func(context.Context) (string, error) { return big, nil })
	require.NoError(t, err)
	res, err := sentinel.Once(ctx, c, "big", func(context.Context) (string, error) { return "", nil })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, big, res.Value)

	small := e.client(&sentinel.Config{MaxResultSize: 1024})
	_, err = sentinel.Once(ctx, small, "too-big", func(context.Context) (string, error) { return big, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
}

func TestOnceTxCommitsWithCompletion(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	c := e.client(nil)
	var runs atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx) (string, error) {
		runs.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" (key) VALUES ('k')")
		return "booked", err
	}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := sentinel.OnceTx(ctx, c, "k", fn)
			if err != nil && !errors.Is(err, sentinel.ErrInProgress) {
				t.Error(err)
			}
			if err == nil {
				require.Equal(t, "booked", res.Value)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 1, e.count("ledger", ""))

	// An error rolls fn's writes back and frees the key.
	_, err = sentinel.OnceTx(ctx, c, "k2", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" (key) VALUES ('k2')")
		require.NoError(t, err)
		return 0, errors.New("declined")
	})
	require.Error(t, err)
	require.Equal(t, 0, e.count("ledger", "key = 'k2'"))
	res, err := sentinel.OnceTx(ctx, c, "k2", func(ctx context.Context, tx pgx.Tx) (int, error) { return 5, nil })
	require.NoError(t, err)
	require.Equal(t, 5, res.Value)
}

// A process killed inside an OnceTx fn leaves neither fn's writes nor a
// completion, and the next call runs it once.
func TestOnceTxKilledLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	c := e.client(nil)
	killInside(t, e, "oncetx", "tx-1")
	waitLeaseExpired(t, c, "tx-1")
	require.Equal(t, 0, e.count("ledger", ""))
	ex, err := c.Inspect(ctx, "tx-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State, "never uncertain")
	var runs atomic.Int32
	res, err := sentinel.OnceTx(ctx, c, "tx-1", func(ctx context.Context, tx pgx.Tx) (string, error) {
		runs.Add(1)
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" (key) VALUES ('tx-1')")
		return "ok", err
	})
	require.NoError(t, err)
	require.Equal(t, "ok", res.Value)
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, 1, e.count("ledger", ""))
}

func TestPrune(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for _, k := range []string{"a", "b"} {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	_, err := sentinel.Once(ctx, c, "bad", func(context.Context) (int, error) { return 0, errors.New("x") })
	require.Error(t, err)
	res, err := c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.Zero(t, res.Executions)
	e.age(2 * time.Hour)
	res, err = c.Prune(ctx, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Executions)
	require.Equal(t, 1, e.count("executions", ""), "the uncertain key is kept")
	require.EqualValues(t, 6, res.Events)
	require.Equal(t, 3, e.count("events", ""), "the uncertain key's history is kept")
	_, err = c.Prune(ctx, -1)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
}

// age moves every timestamp of e's executions and events into the past.
func (e *env) age(d time.Duration) {
	e.t.Helper()
	iv := fmt.Sprintf("%d microseconds", d.Microseconds())
	_, err := admin.Exec(context.Background(), "UPDATE "+e.table("executions")+
		" SET completed_at = completed_at - $1::interval, updated_at = updated_at - $1::interval, created_at = created_at - $1::interval", iv)
	require.NoError(e.t, err)
	_, err = admin.Exec(context.Background(), "UPDATE "+e.table("events")+" SET at = at - $1::interval", iv)
	require.NoError(e.t, err)
}

func TestOnceRecordRejectionsOptIn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{RecordRejections: true})
	_, err := sentinel.Once(ctx, c, "r", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.Equal(t, 3, e.count("events", ""))
	_, err = sentinel.Once(ctx, c, "r", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.Equal(t, 1, e.count("events", "event = 'replayed'"))
}

// upperCodec stores strings upper-cased, to show a custom codec is used.
type upperCodec struct{}

func (upperCodec) Encode(v any) ([]byte, error) { return []byte(strings.ToUpper(v.(string))), nil }
func (upperCodec) Decode(b []byte, v any) error { *(v.(*string)) = string(b); return nil }

func TestOnceCustomCodec(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "codec", func(context.Context) (string, error) { return "hello", nil }, sentinel.WithCodec(upperCodec{}))
	require.NoError(t, err)
	res, err := sentinel.Once(ctx, c, "codec", func(context.Context) (string, error) { return "", nil }, sentinel.WithCodec(upperCodec{}))
	require.NoError(t, err)
	require.Equal(t, "HELLO", res.Value)
	// Decoding into the wrong type is an ErrResult, not a silent zero value.
	_, err = sentinel.Once(ctx, c, "codec", func(context.Context) (int, error) { return 0, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
}

// A claimable key whose row another transaction holds locked is reported in
// progress at once: the claim neither waits for the lock nor calls it
// uncertain.
func TestOnceClaimDoesNotWaitOnALockedRow(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "locked", func(context.Context) (int, error) { return 0, sentinel.Retryable(errors.New("later")) })
	require.Error(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'locked' FOR UPDATE")
	require.NoError(t, err)
	start := time.Now()
	ran := false
	_, err = sentinel.Once(ctx, c, "locked", func(context.Context) (int, error) { ran = true; return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrInProgress)
	require.False(t, ran)
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, tx.Rollback(ctx))
	res, err := sentinel.Once(ctx, c, "locked", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.Equal(t, 2, res.Value)
}

// WithToken guards an operator's step against a concurrent change.
func TestReconcileWithToken(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "op", func(context.Context) (int, error) { return 0, errors.New("unknown") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	seen, err := c.Inspect(ctx, "op")
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "op", sentinel.WithToken(seen.Token+1))
	require.ErrorIs(t, err, sentinel.ErrWrongState)
	require.Contains(t, err.Error(), "expected token")
	rec, err := c.Reconcile(ctx, "op", sentinel.WithToken(seen.Token))
	require.NoError(t, err)
	require.ErrorIs(t, c.ForceComplete(ctx, "op", 1, sentinel.WithToken(seen.Token)), sentinel.ErrWrongState, "the old token is stale")
	require.NoError(t, c.ForceComplete(ctx, "op", 1, sentinel.WithToken(rec.Token)))
	_, err = sentinel.Once(ctx, c, "op", func(context.Context) (int, error) { return 0, nil }, sentinel.WithToken(1))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
}
