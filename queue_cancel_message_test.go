package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A waiter whose ctx ends (Ctrl-C under signal.NotifyContext) is told that
// its ticket left the queue, as one served as its ctx ended is told it was
// given back: the error alone answers "is my place still held, is the
// queue stuck behind me?".
func TestTurnCancelledWaiterToldTicketWithdrawn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 5 * time.Second})
	holder, err := c.Turn(ctx, "plotter")
	require.NoError(t, err)
	defer holder.Release(ctx)

	cause := errors.New("interrupt signal received")
	wctx, cancel := context.WithCancelCause(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Turn(wctx, "plotter", sentinel.WithLabel("impatient"))
		gone <- err
	}()
	waitWaiting(t, c, "plotter", 1)
	cancel(cause)
	err = <-gone
	require.ErrorIs(t, err, cause)
	require.True(t, strings.Contains(err.Error(), "withdrawn from the queue"), "the error does not say the ticket left the queue: %v", err)
	q, err := c.Queue(ctx, "plotter")
	require.NoError(t, err)
	require.Empty(t, q.Waiting, "the ticket said withdrawn is still waiting")
}
