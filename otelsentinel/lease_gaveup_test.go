package otelsentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// A Lease call whose ctx ended before the lease was granted, the key not
// held (or its holder unknown), counts as sentinel.result "canceled": the
// caller gave up, nothing failed, and its span is not an error. Before, it
// counted as "error" with span status Error, beside database failures, so
// an alert on failed acquisitions fired when callers gave up. A WithWait
// call whose ctx ended while the key was held stays "held" (wait true),
// as it was.
func TestLeaseWaitGivenUpIsCanceled(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	a := w.client(nil)
	b := w.client(nil)
	held, err := a.Lease(ctx, "job", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)

	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = b.Lease(tctx, "job", sentinel.WithWait())
	require.ErrorIs(t, err, context.DeadlineExceeded)

	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel2)
	_, err = b.Lease(cctx, "job", sentinel.WithWait())
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, held.Release(ctx))
	// A caller whose ctx ended before it was granted, the key free.
	gone, cancel3 := context.WithCancel(ctx)
	cancel3()
	_, err = b.Lease(gone, "job", sentinel.WithWait())
	require.ErrorIs(t, err, context.Canceled)
	_, err = b.Lease(gone, "job")
	require.ErrorIs(t, err, context.Canceled)

	m := w.metrics()
	require.Equal(t, map[string]int64{"acquired/false": 1, "held/true": 2, "canceled/true": 1, "canceled/false": 1},
		sumBy2(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrResult, otelsentinel.AttrWait))
	results := map[string]int{}
	for _, s := range w.spans.Ended() {
		if s.Name() != "sentinel.Lease" || !spanAttr(s, otelsentinel.AttrWait).AsBool() && spanAttr(s, otelsentinel.AttrResult).AsString() == "acquired" {
			continue
		}
		results[spanAttr(s, otelsentinel.AttrResult).AsString()]++
		require.Equal(t, codes.Unset, s.Status().Code, "the caller gave up: no failure")
	}
	require.Equal(t, map[string]int{"held": 2, "canceled": 2}, results)
}
