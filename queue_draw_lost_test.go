package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A draw that committed but whose reply was lost (the connection dropped
// after the server ran it) is retried: Turn draws again. The first ticket,
// unknown to the client, is not renewed, and nobody gives it up: it holds
// the queue, the retried ticket of its own Turn included, until it
// expires, a TTL later (here the draw served it: the queue is held by
// nobody for a minute, and the Turn times out behind its own ticket).
//
// Known defect, not fixed here: the client cannot tell its lost ticket
// from a live one of another client with the same Owner (Config.Owner:
// neither may free the other's grant), nor from a concurrent Turn's of its
// own still in flight, without a mark of the draw attempt on the row. The
// fix changes the draw (say, a nonce per attempt, the retry first giving
// up the ticket carrying the failed attempt's, through the leave so the
// turn is handed over, or a draw that returns that ticket instead of
// minting one), which this review does not touch. Unskip with the fix.
func TestTurnDrawWhoseReplyWasLostDoesNotQueueBehindItself(t *testing.T) {
	t.Skip("known defect: a draw that committed but whose reply was lost leaves an unknown ticket holding the queue for its TTL; fixing it changes the draw")
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.proxiedClient(px, nil, &sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: 100 * time.Millisecond})
	px.armDrop("queue_ahead(", 300*time.Millisecond)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tn, err := c.Turn(tctx, "printer")
	require.True(t, px.frozen(), "the draw's reply was not cut")
	require.NoError(t, err, "served without waiting out the lost ticket's TTL")
	require.NoError(t, tn.Release(ctx))
}
