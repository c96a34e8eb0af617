package sentinel_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn's lease is lost while it runs (here its hard TTL passes): fn's ctx is
// cancelled with the loss as its cause, and fn, as it should, returns its
// ctx's error. The caller must learn why: OnceTx documents an error
// matching ErrLeaseLost, and Once's uncertain error said only "context
// canceled", as if the caller's own ctx had ended.
func TestLostLeaseIsInTheCallersError(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	opts := []sentinel.Option{sentinel.WithTTL(time.Second), sentinel.WithHardTTL(1500 * time.Millisecond)}
	_, err := sentinel.Once(ctx, c, "once", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, opts...)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)

	_, err = sentinel.OnceTx(ctx, c, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		<-ctx.Done()
		_, err := tx.Exec(ctx, "SELECT 1") // fails with ctx's error
		return 0, err
	}, opts...)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "OnceTx: %v", err)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.NotErrorIs(t, err, sentinel.ErrUncertain, "rolled back: nothing happened")
}

// fn's lease is lost while it runs, and fn, not looking at its ctx,
// returns a value: OnceTx's (and OnceSQLTx's) completion statement runs on fn's ctx, which
// the loss cancelled, so it failed at once with "context canceled", and
// the caller got "completion refused, nothing was committed: context
// canceled", matching neither ErrLeaseLost nor ErrHardTTL, as OnceTx
// documents for a lease lost before commit.
//
// The TTL is a second, not less: the loss must be the hard TTL's, and on a
// loaded machine (CI beside other work) a renewal of a 400 ms lease missed
// its deadline first (the lease lost to "renewal deadline passed").
func TestLostLeaseBeforeOnceTxCompletionIsInTheCallersError(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	opts := []sentinel.Option{sentinel.WithTTL(time.Second), sentinel.WithHardTTL(1500 * time.Millisecond)}
	_, err := sentinel.OnceTx(ctx, c, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		<-ctx.Done() // fn's work took longer than its hard TTL, and fn did not look
		return 1, nil
	}, opts...)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "OnceTx: %v", err)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.NotErrorIs(t, err, sentinel.ErrUncertain, "rolled back: nothing happened")
	ex, err := c.Inspect(ctx, "tx")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State, "nothing committed; the key is free")

	db := stdlib.OpenDBFromPool(e.pool(nil))
	t.Cleanup(func() { _ = db.Close() })
	_, err = sentinel.OnceSQLTx(ctx, c, db, "sqltx", func(ctx context.Context, tx *sql.Tx) (int, error) {
		<-ctx.Done()
		return 1, nil
	}, opts...)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost, "OnceSQLTx: %v", err)
	require.ErrorIs(t, err, sentinel.ErrHardTTL)
	require.NotErrorIs(t, err, sentinel.ErrUncertain)
}
