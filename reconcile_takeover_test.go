package sentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An operator's transitions (Reconcile, ForceComplete, ResetToClaimed) set
// the row's owner to the operator; they kept the crashed worker's host and
// pid, so the row named the operator with the worker's process. The row's
// owner, host and pid are now all the operator's (its Config), and each
// transition's event records whom it took the row from: previous_owner,
// previous_host, previous_pid, previous_token in its metadata, so where
// the crashed attempt ran is still in the history.
func TestOperatorTakeoverRecordsItsOwnProcessAndTheWorkers(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	worker := e.client(&sentinel.Config{Owner: "worker-a", Host: "worker-7.example", PID: 4242})
	_, err := sentinel.Once(ctx, worker, "order-1", func(context.Context) (int, error) {
		return 0, errors.New("the payment provider timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	before, err := worker.Inspect(ctx, "order-1")
	require.NoError(t, err)

	op := e.client(&sentinel.Config{Owner: "alice", Host: "ops-box", PID: 77})
	ex, err := op.Reconcile(ctx, "order-1", sentinel.WithMetadata(map[string]any{"reason": "checking the PSP"}))
	require.NoError(t, err)
	require.Equal(t, "alice", ex.Owner)
	require.Equal(t, "ops-box", ex.Host, "the operator's host, not the worker's")
	require.Equal(t, 77, ex.PID, "the operator's pid, not the worker's")
	got, err := op.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, []any{"alice", "ops-box", 77}, []any{got.Owner, got.Host, got.PID})

	evs, err := op.History(ctx, "order-1")
	require.NoError(t, err)
	rec := evs[len(evs)-1]
	require.Equal(t, "reconciling", rec.Type)
	require.Equal(t, "alice", rec.Metadata["operator"])
	require.Equal(t, "checking the PSP", rec.Metadata["reason"])
	require.Equal(t, "worker-a", rec.Metadata["previous_owner"])
	require.Equal(t, "worker-7.example", rec.Metadata["previous_host"])
	require.EqualValues(t, 4242, rec.Metadata["previous_pid"])
	require.EqualValues(t, before.Token, rec.Metadata["previous_token"])

	// A second operator finishes it: the row is its, the event names the first.
	bob := e.client(&sentinel.Config{Owner: "bob", Host: "bob-laptop", PID: 99})
	require.NoError(t, bob.ForceComplete(ctx, "order-1", 5, sentinel.WithToken(ex.Token)))
	got, err = bob.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, []any{"bob", "bob-laptop", 99}, []any{got.Owner, got.Host, got.PID})
	evs, err = bob.History(ctx, "order-1")
	require.NoError(t, err)
	fc := evs[len(evs)-1]
	require.Equal(t, "force_completed", fc.Type)
	require.Equal(t, "alice", fc.Metadata["previous_owner"])
	require.Equal(t, "ops-box", fc.Metadata["previous_host"])
	require.EqualValues(t, 77, fc.Metadata["previous_pid"])

	// ResetToClaimed likewise.
	_, err = sentinel.Once(ctx, worker, "order-2", func(context.Context) (int, error) {
		return 0, errors.New("the payment provider timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = op.Reconcile(ctx, "order-2")
	require.NoError(t, err)
	require.NoError(t, bob.ResetToClaimed(ctx, "order-2"))
	got, err = bob.Inspect(ctx, "order-2")
	require.NoError(t, err)
	require.Equal(t, []any{sentinel.StateClaimed, "bob", "bob-laptop", 99}, []any{got.State, got.Owner, got.Host, got.PID})
}
