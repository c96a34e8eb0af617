package sentinel_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Issue 17.10: Turn.Release twice returned "sentinel: lease released",
// although its godoc says it is idempotent and Lease.Release twice
// returns nil.
func TestTurnReleaseTwiceIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
	require.NoError(t, tn.Release(ctx), "a second Release of a released turn")
	set, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.NoError(t, set.Release(ctx))
	require.NoError(t, set.Release(ctx), "a second Release of a released turn set")
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx), "Lease.Release, for comparison")
}
