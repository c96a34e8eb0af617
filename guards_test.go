package sentinel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// guardTTL and guardRun: workers guard their writes back to back for four
// TTLs, so a grant survives only if its renewals get through the guards.
const (
	guardTTL = time.Second
	guardRun = 4 * guardTTL
)

// guardedWrites runs workers goroutines that, until d passes, each open a
// transaction, run verify in it, write a row into ledger, hold the
// transaction a little (the guarded work) and commit: the guarded row is
// never free of a guard's lock. It returns the committed and the refused
// (ErrStaleToken) transactions; any other error fails the test.
func guardedWrites(t *testing.T, ctx context.Context, pool *pgxpool.Pool, ledger string, d time.Duration,
	verify func(ctx context.Context, tx pgx.Tx) error) (writes, refused int64) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var w, r atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				err := pgx.BeginFunc(wctx, pool, func(tx pgx.Tx) error {
					if err := verify(wctx, tx); err != nil {
						return err
					}
					if _, err := tx.Exec(wctx, "INSERT INTO "+ledger+" VALUES (1)"); err != nil {
						return err
					}
					time.Sleep(20 * time.Millisecond)
					return nil
				})
				switch {
				case err == nil:
					w.Add(1)
				case errors.Is(err, sentinel.ErrStaleToken):
					r.Add(1)
				case wctx.Err() != nil:
				default:
					t.Errorf("guarded write: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return w.Load(), r.Load()
}

func newLedger(t *testing.T, e *env) string {
	t.Helper()
	_, err := admin.Exec(context.Background(), "CREATE TABLE "+e.table("ledger")+" (n int NOT NULL)")
	require.NoError(t, err)
	return e.table("ledger")
}

// Issue 17.2: VerifyToken locked the lease row FOR SHARE, which every
// renewal (FOR NO KEY UPDATE SKIP LOCKED) skipped as busy, so a holder
// guarding its writes back to back lost its lease at its renewal deadline.
// Its guards now lock FOR KEY SHARE: the holder keeps its lease, and a
// stale token is still refused.
func TestLeaseKeptUnderBackToBackGuardedWrites(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ledger := newLedger(t, e)
	c := e.client(&sentinel.Config{DefaultTTL: guardTTL})
	l, err := c.Lease(ctx, "acct")
	require.NoError(t, err)
	writes, refused := guardedWrites(t, ctx, c.Pool(), ledger, guardRun, func(ctx context.Context, tx pgx.Tx) error {
		return c.VerifyToken(ctx, tx, "acct", l.Token())
	})
	t.Logf("%d guarded writes, %d refused", writes, refused)
	select {
	case <-l.Done():
		t.Fatalf("the lease was lost to its own guarded writes: %v", l.Err())
	default:
	}
	require.Zero(t, refused)
	require.Greater(t, writes, int64(50))
	require.NoError(t, l.Heartbeat(ctx))

	// Taken over (forced), the old token is refused and the new one passes.
	b := e.client(nil)
	cur, err := b.Lease(ctx, "acct", sentinel.WithForce())
	require.NoError(t, err)
	require.ErrorIs(t, pgx.BeginFunc(ctx, c.Pool(), func(tx pgx.Tx) error {
		return c.VerifyToken(ctx, tx, "acct", l.Token())
	}), sentinel.ErrStaleToken)
	require.NoError(t, b.VerifyToken(ctx, b.Pool(), "acct", cur.Token()))
}

// Issue 17.2, for Turn: VerifyTurn locked the ticket FOR SHARE and starved
// the turn's renewals.
func TestTurnKeptUnderBackToBackGuardedWrites(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ledger := newLedger(t, e)
	c := e.client(&sentinel.Config{DefaultTTL: guardTTL})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	// Someone waits behind it all along: it must not be served.
	next := make(chan *sentinel.Turn, 1)
	go func() {
		n, err := e.client(&sentinel.Config{DefaultTTL: guardTTL}).Turn(ctx, "printer")
		if err == nil {
			next <- n
		}
		close(next)
	}()
	writes, refused := guardedWrites(t, ctx, c.Pool(), ledger, guardRun, func(ctx context.Context, tx pgx.Tx) error {
		return c.VerifyTurn(ctx, tx, "printer", tn.Ticket())
	})
	t.Logf("%d guarded writes, %d refused", writes, refused)
	select {
	case <-tn.Done():
		t.Fatalf("the turn was lost to its own guarded writes: %v", tn.Err())
	case <-next:
		t.Fatal("the ticket behind was served while the turn was held")
	default:
	}
	require.Zero(t, refused)
	require.Greater(t, writes, int64(50))

	require.NoError(t, tn.Release(ctx))
	n, ok := <-next
	require.True(t, ok)
	require.ErrorIs(t, c.VerifyTurn(ctx, c.Pool(), "printer", tn.Ticket()), sentinel.ErrStaleToken)
	require.NoError(t, c.VerifyTurn(ctx, c.Pool(), "printer", n.Ticket()))
	require.NoError(t, n.Release(ctx))
}

// Issue 17.2, for Once: fn guarding its writes back to back with
// VerifyExecutionToken starved the execution lease's renewals, and the
// key ended uncertain although nothing was wrong.
func TestOnceKeptUnderBackToBackGuardedWrites(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ledger := newLedger(t, e)
	c := e.client(&sentinel.Config{DefaultTTL: guardTTL})
	var token int64
	res, err := sentinel.Once(ctx, c, "charge", func(ctx context.Context) (int64, error) {
		token, _ = sentinel.TokenFromContext(ctx)
		writes, refused := guardedWrites(t, ctx, c.Pool(), ledger, guardRun, func(ctx context.Context, tx pgx.Tx) error {
			return c.VerifyExecutionToken(ctx, tx, "charge", token)
		})
		if ctx.Err() != nil {
			return 0, context.Cause(ctx)
		}
		if refused != 0 {
			return 0, errors.New("guarded writes refused")
		}
		return writes, nil
	}, sentinel.WithHardTTL(time.Minute))
	require.NoError(t, err, "the execution was lost to its own guarded writes")
	t.Logf("%d guarded writes", res.Value)
	require.Greater(t, res.Value, int64(50))

	// The token of a completed execution is refused.
	require.ErrorIs(t, c.VerifyExecutionToken(ctx, c.Pool(), "charge", token), sentinel.ErrStaleToken)
}

// Issue 17.2, for OnceTx: fn verifying its token in its own transaction
// locks the execution row for the whole of fn; the renewals must get
// through that lock, or the claim expires under a healthy fn.
func TestOnceTxKeptUnderItsOwnGuard(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ledger := newLedger(t, e)
	c := e.client(&sentinel.Config{DefaultTTL: guardTTL})
	var token int64
	res, err := sentinel.OnceTx(ctx, c, "book", func(ctx context.Context, tx pgx.Tx) (int, error) {
		token, _ = sentinel.TokenFromContext(ctx)
		n := 0
		for start := time.Now(); time.Since(start) < guardRun; n++ {
			if err := c.VerifyExecutionToken(ctx, tx, "book", token); err != nil {
				return 0, err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+ledger+" VALUES (1)"); err != nil {
				return 0, err
			}
			time.Sleep(20 * time.Millisecond)
		}
		return n, nil
	}, sentinel.WithHardTTL(time.Minute))
	require.NoError(t, err, "the claim was lost to fn's own guard")
	require.Equal(t, res.Value, e.count("ledger", ""))
	require.ErrorIs(t, c.VerifyExecutionToken(ctx, c.Pool(), "book", token), sentinel.ErrStaleToken)
}

// Issue 17.2: a guard still excludes every grant to someone else while its
// transaction is open: a claim's takeover of an expired OnceTx claim, and
// an operator's transition of an expired execution.
func TestExecutionGuardHoldsOffTakeoverAndOperator(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// The claims are expired by hand below; a TTL long enough that a
	// loaded machine does not expire them first (fn would then fail its
	// verification and never report the token).
	c := e.client(&sentinel.Config{DefaultTTL: 5 * time.Second})

	// A claimed OnceTx whose lease expired while its guard is open.
	held := make(chan int64)
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.OnceTx(ctx, c, "k", func(ctx context.Context, tx pgx.Tx) (int, error) {
			tok, _ := sentinel.TokenFromContext(ctx)
			if err := c.VerifyExecutionToken(ctx, tx, "k", tok); err != nil {
				return 0, err
			}
			held <- tok
			<-release
			return 1, nil
		})
		done <- err
	}()
	var tok int64
	select {
	case tok = <-held:
	case err := <-done:
		t.Fatalf("OnceTx returned before fn held its guard: %v", err)
	}
	// Expire the claim behind the client's back (as a frozen holder's
	// would), without touching the guard's lock.
	other := e.client(nil)
	_, err := other.Pool().Exec(ctx, "UPDATE "+e.table("executions")+" SET lease_expires_at = clock_timestamp() WHERE key = 'k'")
	require.NoError(t, err)
	ran := false
	_, err = sentinel.OnceTx(ctx, other, "k", func(context.Context, pgx.Tx) (int, error) { ran = true; return 2, nil })
	require.ErrorIs(t, err, sentinel.ErrInProgress, "a claim took over a row under an open guard")
	require.False(t, ran)
	close(release)
	require.Error(t, <-done, "the expired claim's completion is refused")
	_ = tok

	// An executing key whose lease expired: ForceComplete waits for the
	// open guard.
	held2 := make(chan int64)
	release2 := make(chan struct{})
	done2 := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, c, "x", func(ctx context.Context) (int, error) {
			tok, _ := sentinel.TokenFromContext(ctx)
			tx, err := c.Pool().Begin(ctx)
			if err != nil {
				return 0, err
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if err := c.VerifyExecutionToken(ctx, tx, "x", tok); err != nil {
				return 0, err
			}
			held2 <- tok
			<-release2
			return 0, tx.Commit(context.Background())
		})
		done2 <- err
	}()
	select {
	case <-held2:
	case err := <-done2:
		t.Fatalf("Once returned before fn held its guard: %v", err)
	}
	_, err = other.Pool().Exec(ctx, "UPDATE "+e.table("executions")+" SET lease_expires_at = clock_timestamp() WHERE key = 'x'")
	require.NoError(t, err)
	forced := make(chan error, 1)
	go func() {
		if _, err := other.Reconcile(ctx, "x"); err != nil {
			forced <- err
			return
		}
		forced <- nil
	}()
	select {
	case err := <-forced:
		t.Fatalf("an operator transition committed under an open guard: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release2)
	require.NoError(t, <-forced)
}
