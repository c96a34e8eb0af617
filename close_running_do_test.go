package sentinel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Client.Close while Do's fn runs releases the lease: another client can
// be granted the key while fn still runs (Close cancels fn's ctx before
// it frees the key, but fn may take a moment to stop). Do's error said
// "lost: client closed", without what that means for fn's writes, and
// Close logged nothing, so a deploy that cut a Do short left no trace in
// the logs. The error now says that another holder may have taken the
// key, as every other such loss does, and Close logs a Warn naming the
// key. A plain Lease Close releases is not logged: its holder, not Close,
// knows whether work still runs under it, and learns of the end (Done)
// before anyone else can be granted the key.
func TestCloseDuringDoSaysTheKeyMayGoToAnother(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	other := e.client(nil)

	logs, err := closeWhileRunning(t, e, func(c *sentinel.Client, started func(), cut <-chan struct{}) error {
		return c.Do(ctx, "nightly", func(ctx context.Context, l *sentinel.Lease) error {
			started()
			<-ctx.Done()
			<-cut
			return nil
		})
	}, func() {
		l, err := other.Lease(ctx, "nightly")
		require.NoError(t, err, "Close freed the key while fn still runs")
		require.NoError(t, l.Release(ctx))
	})
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)
	require.ErrorContains(t, err, "another holder may have taken the key")
	w := warns(logs)
	require.Len(t, w, 1, "%s", logs)
	require.Contains(t, w[0], "running Do")
	require.Contains(t, w[0], "key=nightly")

	// A plain Lease: Close releases it, its holder learns of it (Done)
	// and its Release returns nil; nothing is logged.
	logs, err = closeWhileRunning(t, e, func(c *sentinel.Client, started func(), cut <-chan struct{}) error {
		l, err := c.Lease(ctx, "job")
		if err != nil {
			return err
		}
		started()
		<-l.Done()
		<-cut
		require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
		return l.Release(ctx)
	}, func() {
		l, err := other.Lease(ctx, "job")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	})
	require.NoError(t, err)
	require.Empty(t, warns(logs))
}
