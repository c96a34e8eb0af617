package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Event.PreviousHolder reads the worker an operator step took a key from,
// as the step's event records it in its metadata (previous_owner,
// previous_host, previous_pid, previous_token); an event without them
// gives false.
func TestEventPreviousHolder(t *testing.T) {
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
	ex, err := op.Reconcile(ctx, "order-1")
	require.NoError(t, err)
	evs, err := op.History(ctx, "order-1")
	require.NoError(t, err)

	rec := evs[len(evs)-1]
	require.Equal(t, "reconciling", rec.Type)
	got, ok := rec.PreviousHolder()
	require.True(t, ok)
	require.Equal(t, sentinel.PreviousHolder{Owner: "worker-a", Host: "worker-7.example", PID: 4242, Token: before.Token}, got)

	for _, ev := range evs[:len(evs)-1] {
		got, ok := ev.PreviousHolder()
		require.False(t, ok, "%s event has no previous holder", ev.Type)
		require.Zero(t, got)
	}

	// ForceComplete keeps the token: its event records no previous_token.
	require.NoError(t, op.ForceComplete(ctx, "order-1", 5, sentinel.WithToken(ex.Token)))
	evs, err = op.History(ctx, "order-1")
	require.NoError(t, err)
	fc := evs[len(evs)-1]
	require.Equal(t, "force_completed", fc.Type)
	got, ok = fc.PreviousHolder()
	require.True(t, ok)
	require.Equal(t, sentinel.PreviousHolder{Owner: "alice", Host: "ops-box", PID: 77}, got)

	// A token beyond 2^53 is read exactly (History keeps it a json.Number).
	big := sentinel.Event{Type: "reconciling", Metadata: map[string]any{
		"previous_owner": "w", "previous_token": json.Number("9007199254740993"), "previous_pid": float64(3)}}
	got, ok = big.PreviousHolder()
	require.True(t, ok)
	require.Equal(t, sentinel.PreviousHolder{Owner: "w", PID: 3, Token: 9007199254740993}, got)

	got, ok = sentinel.Event{Type: "reconciling"}.PreviousHolder()
	require.False(t, ok, "an event written before reconcile recorded the worker")
	require.Zero(t, got)
}
