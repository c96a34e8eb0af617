package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	opts := []sentinel.Option{sentinel.WithTTL(400 * time.Millisecond), sentinel.WithHardTTL(800 * time.Millisecond)}
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
