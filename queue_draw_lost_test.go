package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A draw that committed but whose reply was lost (the connection dropped
// after the server ran it) is retried. Were the retry to draw again, the
// first ticket, unknown to the client, renewed by nobody and given up by
// nobody, would hold the queue, the retried ticket of its own Turn
// included, until it expired, a TTL later (here the draw served it: the
// queue would be held by nobody for a minute, and the Turn time out
// behind its own ticket).
//
// Every attempt of a draw carries one mark (migration 020): the retry
// adopts the ticket its lost attempt drew, and the Turn is served at once.
func TestTurnDrawWhoseReplyWasLostDoesNotQueueBehindItself(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: 100 * time.Millisecond})
	px.armDrop("queue_draw(", 300*time.Millisecond)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tn, err := c.Turn(tctx, "printer")
	require.True(t, px.frozen(), "the draw's reply was not cut")
	require.NoError(t, err, "served without waiting out the lost ticket's TTL")
	require.NoError(t, tn.Release(ctx))
}
