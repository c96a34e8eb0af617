package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A lease waiter (WithWait) whose client closes got a bare "sentinel:
// client closed", which does not say what became of its registration:
// was it withdrawn, or will the next release hand the key to nobody? Its
// error now says so, as a waiter whose ctx ended is told; it still
// matches ErrClosed.
func TestLeaseWaitClosedToldRegistrationWithdrawn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	held, err := holder.Lease(ctx, "lathe")
	require.NoError(t, err)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})

	gone := make(chan error, 1)
	go func() {
		_, err := c.Lease(ctx, "lathe", sentinel.WithWait())
		gone <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'lathe'") == 1
	})
	c.Close()
	select {
	case err = <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end with Close")
	}
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.Contains(t, err.Error(), "registration withdrawn", "the error does not say what became of the registration: %v", err)
	require.Zero(t, e.count("lease_waiters", "key = 'lathe'"), "the registration said withdrawn is still there")
	// The next release hands the key to nobody: it is free at once.
	require.NoError(t, held.Release(ctx))
	l, err := e.client(nil).Lease(context.WithoutCancel(ctx), "lathe")
	require.NoError(t, err, "the key was handed to the closed waiter")
	require.NoError(t, l.Release(ctx))
}
