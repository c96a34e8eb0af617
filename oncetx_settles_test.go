package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An OnceTx whose connection is cut as its transaction commits (a failover
// at the commit), while its key cannot be read back to learn whether the
// commit landed (the table is locked past Config.ReleaseTimeout). Nothing
// needs an operator: fn's writes and the completion commit or vanish
// together, so the key is completed, or still this attempt's claim until
// its lease expires, then free for the next call. The call's error said
// "reconcile it", the log asked a person to reconcile the key, and the
// Observer counted it uncertain, the outcome that pages. Now the error
// matches ErrUncertain (the outcome is unknown to this call) with Settles
// set, says no operator is needed, is counted commit_unknown, and the next
// call after the lease runs fn again.
func TestOnceTxCommitNotConfirmedSettlesWithoutAnOperator(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	seats := pgx.Identifier{e.schema, "seats"}.Sanitize()
	cut := pgx.Identifier{e.schema, "cut"}.Sanitize()
	// A deferred constraint trigger, run by the commit: it waits (for the
	// lock below to queue behind the transaction), then cuts its own
	// connection, before the commit record is written.
	_, err := admin.Exec(ctx, `CREATE TABLE `+seats+` (n int NOT NULL);
		CREATE FUNCTION `+cut+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_catalog.pg_sleep(0.5); PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid()); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER cut AFTER INSERT ON `+seats+` DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.n = 1) EXECUTE FUNCTION `+cut+`()`)
	require.NoError(t, err)

	var logs lockedBuffer
	var outcomes []sentinel.OnceOutcome
	c := e.client(&sentinel.Config{DefaultTTL: time.Second, ReleaseTimeout: 300 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Observer: &sentinel.Observer{OnceEnd: func(_ context.Context, ev sentinel.OnceEvent) { outcomes = append(outcomes, ev.Outcome) }}})

	var runs atomic.Int64
	var txPID atomic.Int32
	fn := func(ctx context.Context, tx pgx.Tx) (int, error) {
		n := runs.Add(1)
		var pid int32
		if err := tx.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
			return 0, err
		}
		txPID.Store(pid)
		_, err := tx.Exec(ctx, "INSERT INTO "+seats+" (n) VALUES ($1)", n)
		return int(n), err
	}

	// While the commit sleeps in the trigger, lock the executions table:
	// the lock is granted once the transaction is gone, and every read of
	// the key waits for it past ReleaseTimeout.
	lockTx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lockTx.Rollback(context.Background()) }()
	locked := make(chan error, 1)
	go func() {
		for {
			var sleeping bool
			if pid := txPID.Load(); pid != 0 && admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", pid).Scan(&sleeping) == nil && sleeping {
				break
			}
			select {
			case <-ctx.Done():
				locked <- ctx.Err()
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		_, err := lockTx.Exec(ctx, "LOCK TABLE "+e.table("executions")+" IN ACCESS EXCLUSIVE MODE")
		locked <- err
	}()
	_, err = sentinel.OnceTx(ctx, c, "seat", fn)
	require.NoError(t, <-locked)
	require.NoError(t, lockTx.Rollback(ctx))

	require.ErrorIs(t, err, sentinel.ErrUncertain)
	var ee *sentinel.ExecutionError
	require.True(t, errors.As(err, &ee))
	require.True(t, ee.Settles, "%v", err)
	require.Equal(t, sentinel.StateClaimed, ee.State)
	require.NotContains(t, err.Error(), "reconcile")
	require.Contains(t, err.Error(), "settled without an operator")
	require.Equal(t, sentinel.OutcomeCommitUnknown, sentinel.OnceOutcomeOf(false, err))
	require.Equal(t, []sentinel.OnceOutcome{sentinel.OutcomeCommitUnknown}, outcomes)
	require.NotContains(t, logs.String(), "reconcile it")
	require.Contains(t, logs.String(), "settles without an operator")

	// Nothing committed: the key is this attempt's claim, not uncertain,
	// and once its lease expires the next call runs fn again.
	ex, err := c.Inspect(ctx, "seat")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State)
	other := e.client(nil)
	require.Eventually(t, func() bool {
		res, err := sentinel.OnceTx(ctx, other, "seat", fn)
		return err == nil && res.Value == 2
	}, 10*time.Second, 100*time.Millisecond, "the next call after the lease ran fn again")
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+seats).Scan(&n))
	require.Equal(t, 1, n, "only the second attempt's write committed")
}
