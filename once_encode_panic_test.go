package sentinel_test

import (
	"context"
	"fmt"
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

// declined is an error type whose Error method reads its receiver: a nil
// *declined returned as an error (the typed-nil mistake) panics there.
type declined struct{ reason string }

func (d *declined) Error() string { return "declined: " + d.reason }

// fn returned an error whose Error method panics. Once read its text to
// record the outcome, outside fn's recovery: the panic escaped the
// library, the key stayed executing with no outcome recorded, and a
// Retryable one (nothing happened) became uncertain instead of being
// handed back; OnceTx the same, with its transaction left to the pool.
// The outcome is recorded as for any error, with the text fmt gives.
func TestFnErrorWhoseErrorMethodPanics(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var bad *declined
	require.NotPanics(t, func() {
		_, err := sentinel.Once(ctx, c, "plain", func(context.Context) (int, error) { return 0, bad })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	})
	evs, err := c.History(ctx, "plain")
	require.NoError(t, err)
	require.Equal(t, "failed", evs[len(evs)-1].Type)

	require.NotPanics(t, func() {
		_, err := sentinel.Once(ctx, c, "retry", func(context.Context) (int, error) { return 0, sentinel.Retryable(bad) })
		require.True(t, sentinel.IsRetryable(err))
	})
	res, err := sentinel.Once(ctx, c, "retry", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err, "a Retryable outcome hands the key back")
	require.Equal(t, 7, res.Value)

	require.NotPanics(t, func() {
		_, err := sentinel.Once(ctx, c, "final", func(context.Context) (int, error) { return 0, sentinel.Final(bad) })
		require.ErrorIs(t, err, sentinel.ErrFinal)
	})
	_, err = sentinel.Once(ctx, c, "final", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrFinal)

	for _, final := range []bool{false, true} {
		key := fmt.Sprintf("tx-%v", final)
		require.NotPanics(t, func() {
			_, err := sentinel.OnceTx(ctx, c, key, func(context.Context, pgx.Tx) (int, error) {
				if final {
					return 0, sentinel.Final(bad)
				}
				return 0, bad
			})
			require.Error(t, err)
		})
		ex, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		if final {
			require.Equal(t, sentinel.StateCompleted, ex.State)
		} else {
			require.Equal(t, sentinel.StateClaimed, ex.State, "rolled back and handed back")
		}
	}
}
