package sentinel_test

// This file: OnceTx when its commit's reply is lost while the commit is
// still in flight.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A commit whose reply is lost may still be in flight (waiting for a
// synchronous standby, say): read at once, the key is still claimed,
// though the commit lands a moment later. OnceTx then gave the key back,
// a give-back that waited for the commit and found the key completed, and
// told the caller "commit failed, nothing was committed" (a caller who
// retried would pay twice). Only a give-back that applied proves nothing
// committed: one that did not is followed by reading the key again, and a
// commit that landed is the call's success.
func TestOnceTxCommitInFlightIsNotReportedRolledBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, "CREATE TABLE "+e.table("ledger")+" (key text NOT NULL)")
	require.NoError(t, err)
	c := e.client(&sentinel.Config{ReleaseTimeout: 5 * time.Second})
	res, ended, err := sentinel.OnceTxCommitReplyLost(ctx, c, "charge-1", 500*time.Millisecond,
		func(ctx context.Context, tx pgx.Tx) (string, error) {
			_, err := tx.Exec(ctx, "INSERT INTO "+e.table("ledger")+" (key) VALUES ('charge-1')")
			return "booked", err
		})
	<-ended
	require.Equal(t, 1, e.count("ledger", ""), "the commit landed")
	require.NoError(t, err, "the commit landed, and the caller was told it did not")
	require.Equal(t, "booked", res.Value)
	ex, err := c.Inspect(ctx, "charge-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
}
