package otelsentinel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// Client.AdoptHandle counts in sentinel.lease.acquisitions as "adopted"
// (a lease taken over from another process, not a second acquisition of
// the key) or "stale" (the handle was no longer the current grant: an
// outcome the caller expects, so its span is no error).
func TestAdoptHandleMetricsAndSpans(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	dispatcher, worker := w.client(nil), w.client(nil)
	l, err := dispatcher.Lease(ctx, "job")
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	adopted, err := worker.AdoptHandle(ctx, h)
	require.NoError(t, err)
	_, err = worker.AdoptHandle(ctx, h)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	require.NoError(t, adopted.Release(ctx))

	m := w.metrics()
	require.Equal(t, map[string]int64{"acquired": 1, "adopted": 1, "stale": 1},
		sumBy(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrResult))
	results := map[string]int{}
	for _, s := range w.spans.Ended() {
		if s.Name() != "sentinel.Lease" {
			continue
		}
		r := spanAttr(s, otelsentinel.AttrResult).AsString()
		results[r]++
		require.Equal(t, codes.Unset, s.Status().Code, r)
		if r == "adopted" {
			require.Equal(t, adopted.Token(), spanAttr(s, otelsentinel.AttrToken).AsInt64())
		}
	}
	require.Equal(t, map[string]int{"acquired": 1, "adopted": 1, "stale": 1}, results)
}

// An adoption refused because the lease's hard expiry is within the
// margin of the TTL asked (AdoptHandle gives the grant back and returns
// ErrHardTTL) is an outcome the caller expects, as "stale" is: it counts
// as "hard_ttl" (the word lease.losses uses for that reason), not
// "error", and its span's status stays Unset, with the error recorded on
// it as an event.
func TestAdoptHandlePastItsHardTTLIsNoError(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	dispatcher, worker := w.client(nil), w.client(nil)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(3*time.Second), sentinel.WithHardTTL(3*time.Second))
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	// Its margin, a tenth of an hour, is far past the 3s left.
	_, err = worker.AdoptHandle(ctx, h, sentinel.WithTTL(time.Hour))
	require.ErrorIs(t, err, sentinel.ErrHardTTL)

	m := w.metrics()
	require.Equal(t, map[string]int64{"acquired": 1, "hard_ttl": 1},
		sumBy(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrResult))
	if losses, ok := m["sentinel.lease.losses"]; ok {
		require.Empty(t, sumBy(t, losses, otelsentinel.AttrReason), "a refused adoption is no loss")
	}
	var found bool
	for _, s := range w.spans.Ended() {
		if s.Name() != "sentinel.Lease" || spanAttr(s, otelsentinel.AttrResult).AsString() == "acquired" {
			continue
		}
		found = true
		require.Equal(t, "hard_ttl", spanAttr(s, otelsentinel.AttrResult).AsString())
		require.Equal(t, codes.Unset, s.Status().Code)
		require.NotEmpty(t, s.Events(), "the refusal is recorded on the span")
	}
	require.True(t, found, "the adoption's span")
}
