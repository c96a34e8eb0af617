package sentinel_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// panicky's encoding panics (a MarshalJSON with a bug).
type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("marshal bug") }

// fn succeeded but encoding its result panicked. Once: the key is
// completed without a result (ErrResult), as for any result that cannot
// be encoded, not left executing for an operator with no evidence.
// OnceTx: rolled back and the key freed, not a transaction left open
// (holding fn's row locks and a pooled connection) with the key claimed.
func TestResultEncodingThatPanics(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	c := e.client(nil)

	var res sentinel.Result[panicky]
	require.NotPanics(t, func() {
		res, err = sentinel.Once(ctx, c, "once", func(context.Context) (panicky, error) { return panicky{}, nil })
	})
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.ErrorContains(t, err, "marshal bug")
	ex, err := c.Inspect(ctx, "once")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.Contains(t, ex.ResultError, "marshal bug")
	_ = res

	require.NotPanics(t, func() {
		_, err = sentinel.OnceTx(ctx, c, "tx", func(ctx context.Context, tx pgx.Tx) (panicky, error) {
			_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" VALUES ('tx')")
			return panicky{}, err
		})
	})
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.Equal(t, 0, e.count("ledger", ""), "nothing committed")
	// The key is free at once, and no transaction holds it open.
	ran, err := sentinel.OnceTx(ctx, c, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" VALUES ('tx')")
		return 7, err
	})
	require.NoError(t, err)
	require.Equal(t, 7, ran.Value)
	require.Equal(t, 1, e.count("ledger", ""))
}
