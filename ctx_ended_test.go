package sentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A Lease, a Lease WithWait, a Turn and a Once whose ctx had ended before
// the call sent their first statement anyway (let outlive ctx by a second,
// so that a grant made as ctx ends is known): they were granted, then given
// back, minting tokens and leaving a lease row, and the Turn recorded
// `assigned`, `granted` and `completed` for a turn nobody took. A call
// whose ctx ended before it began sends nothing.
func TestACallWhoseContextEndedWritesNothing(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ended, cancel := context.WithCancel(ctxT(t))
	cancel()
	_, err := c.Lease(ended, "k")
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.Lease(ended, "k-wait", sentinel.WithWait())
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.Turn(ended, "printer", sentinel.WithLabel("nobody"))
	require.ErrorIs(t, err, context.Canceled)
	cause := errors.New("shutting down (test)")
	withCause, stop := context.WithCancelCause(ctxT(t))
	stop(cause)
	_, err = c.Turn(withCause, "printer")
	require.ErrorIs(t, err, cause, "Turn's error wraps ctx's cause")
	_, err = sentinel.Once(ended, c, "once", func(context.Context) (int, error) {
		t.Fatal("fn must not run")
		return 0, nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Zero(t, e.count("leases", ""), "lease rows")
	require.Zero(t, e.count("tickets", ""), "tickets")
	require.Zero(t, e.count("queue_events", ""), "queue events")
	require.Zero(t, e.count("executions", ""), "executions")
	require.Zero(t, e.count("events", ""), "history events")
}
