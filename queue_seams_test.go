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

// Turn.Release after Close returned an error matching ErrLeaseLost ("lost:
// client closed"), which its godoc reserves for a turn whose ticket expired
// (someone behind may have been served), although Close had given the live
// ticket back; Lease.Release after Close returns nil.
func TestTurnReleaseAfterCloseIsNil(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	set, err := c.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	c.Close()
	require.Zero(t, e.count("tickets", ""), "Close gives the tickets back")
	require.NoError(t, tn.Release(ctx), "Turn.Release after Close")
	require.NoError(t, set.Release(ctx), "TurnSet.Release after Close")
	require.NoError(t, l.Release(ctx), "Lease.Release after Close, for comparison")
}
