package sentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn closed OnceTx's transaction itself and returned an error (or
// panicked): the key is left uncertain, and its history must carry fn's
// error, the only clue an operator has; it said only that the transaction
// was closed.
func TestOnceTxClosedByFnRecordsFnsError(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.OnceTx(ctx, c, "closed", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_ = tx.Rollback(ctx)
		return 0, errors.New("card network timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	func() {
		defer func() { require.Equal(t, "kaboom", recover()) }()
		_, _ = sentinel.OnceTx(ctx, c, "closed-panics", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_ = tx.Rollback(ctx)
			panic("kaboom")
		})
	}()
	for key, want := range map[string]string{"closed": "card network timed out", "closed-panics": "panic: kaboom"} {
		hist, err := c.History(ctx, key)
		require.NoError(t, err)
		last := hist[len(hist)-1]
		require.Equal(t, "failed", last.Type)
		require.Contains(t, last.Metadata["error"], "transaction itself")
		require.Contains(t, last.Metadata["error"], want, "%s: the history lost fn's error", key)
	}
}
