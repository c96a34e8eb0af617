package sentinel_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An OnceTx (or OnceSQLTx) fn that returns Final(err), or a value, after a
// statement in its transaction failed: the transaction is aborted
// (SQLSTATE 25P02), so the outcome cannot be recorded in it. Rolling back
// and freeing the key is right, but the caller read "completion refused,
// nothing was committed: ... current transaction is aborted ...", which
// reads like a lost lease. It now says that fn's transaction was aborted by
// a failed statement, that nothing was committed and that the key is free;
// it does not match ErrFinal (nothing was stored: the next caller runs fn
// again), and fn's error is still reachable.
func TestOnceTxOutcomeInAnAbortedTransaction(t *testing.T) {
	c, db, table := sqlEnv(t)
	ctx := ctxT(t)
	declined := errors.New("card declined")
	check := func(t *testing.T, key string, err error, final bool) {
		t.Helper()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "completion refused")
		require.Contains(t, err.Error(), "aborted by a failed statement")
		require.Contains(t, err.Error(), "nothing was committed")
		require.Contains(t, err.Error(), "the key is free")
		require.NotErrorIs(t, err, sentinel.ErrFinal)
		require.NotErrorIs(t, err, sentinel.ErrLeaseLost)
		require.NotErrorIs(t, err, sentinel.ErrUncertain)
		if final {
			require.ErrorIs(t, err, declined)
			require.Contains(t, err.Error(), `Final outcome ("card declined")`)
		}
		ex, ierr := c.Inspect(ctx, key)
		require.NoError(t, ierr)
		require.Equal(t, sentinel.StateClaimed, ex.State)
		res, err := sentinel.OnceTx(ctx, c, key, func(context.Context, pgx.Tx) (int, error) { return 7, nil })
		require.NoError(t, err, "the key is free: the next caller runs fn")
		require.Equal(t, 7, res.Value)
	}
	for _, final := range []bool{true, false} {
		fnErr := error(nil)
		if final {
			fnErr = sentinel.Final(declined)
		}
		key := "tx-" + map[bool]string{true: "final", false: "value"}[final]
		_, err := sentinel.OnceTx(ctx, c, key, func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, serr := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('a', 1/0)")
			require.Error(t, serr)
			return 1, fnErr
		})
		check(t, key, err, final)

		key = "sql-" + key
		_, err = sentinel.OnceSQLTx(ctx, c, db, key, func(ctx context.Context, tx *sql.Tx) (int, error) {
			_, serr := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES ('a', 1/0)")
			require.Error(t, serr)
			return 1, fnErr
		})
		check(t, key, err, final)
	}
	require.Zero(t, countRows(t, db, table))
}
