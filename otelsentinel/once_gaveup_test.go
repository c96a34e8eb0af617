package otelsentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// A Once or OnceTx call whose caller's ctx ended before fn ran (the key is
// left claimable) counts as outcome "canceled", its span not an error: the
// caller gave up, nothing failed. Before, it counted as "error" with
// status Error, beside database failures and bad input. A WithWait call
// that gave up while the key was executing stays "in_progress".
func TestOnceGivenUpIsCanceled(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(nil)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := sentinel.Once(gone, c, "k", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, context.Canceled)
	_, err = sentinel.OnceTx(gone, c, "t", func(context.Context, pgx.Tx) (int, error) { return 1, nil })
	require.ErrorIs(t, err, context.Canceled)

	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, c, "p", func(context.Context) (int, error) {
			close(started)
			<-finish
			return 2, nil
		}, sentinel.WithTTL(5*time.Second))
		done <- err
	}()
	<-started
	tctx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	_, err = sentinel.Once(tctx, c, "p", func(context.Context) (int, error) { return 0, nil }, sentinel.WithWait())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(finish)
	require.NoError(t, <-done)
	// the key given back by the cancelled call runs for the next caller
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	require.Equal(t, map[string]int64{"canceled": 2, "in_progress": 1, "ran": 2},
		sumBy(t, w.metrics()["sentinel.once.calls"], otelsentinel.AttrOutcome))
	for _, s := range w.spans.Ended() {
		require.Equal(t, codes.Unset, s.Status().Code, "%s %s", s.Name(), spanAttr(s, otelsentinel.AttrOutcome).AsString())
	}
}
