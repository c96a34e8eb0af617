package otelsentinel_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// The package documentation promises that a lease call ending in an
// outcome the caller expects, held or stale (as hard_ttl), records what the
// caller was told as an event on its span, with status Unset. Before, the
// held and stale spans carried no event: a trace of a job that did not run
// because its lease was held did not say by whom.
func TestHeldAndStaleLeaseSpansRecordTheError(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	a, b := w.client(nil), w.client(nil)
	l, err := a.Lease(ctx, "job")
	require.NoError(t, err)
	_, err = b.Lease(ctx, "job") // a TryLock: held elsewhere
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	heldMsg := err.Error()
	h, err := l.Detach()
	require.NoError(t, err)
	adopted, err := b.AdoptHandle(ctx, h)
	require.NoError(t, err)
	_, err = b.AdoptHandle(ctx, h) // no longer the current grant
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	staleMsg := err.Error()
	require.NoError(t, adopted.Release(ctx))

	want := map[string]string{"held": heldMsg, "stale": staleMsg}
	seen := map[string]bool{}
	for _, s := range w.spans.Ended() {
		r := spanAttr(s, otelsentinel.AttrResult).AsString()
		msg, ok := want[r]
		if s.Name() != "sentinel.Lease" || !ok {
			continue
		}
		seen[r] = true
		require.Equal(t, codes.Unset, s.Status().Code, "%s is an outcome the caller expects", r)
		var got []string
		for _, ev := range s.Events() {
			for _, kv := range ev.Attributes {
				if kv.Key == attribute.Key("exception.message") {
					got = append(got, kv.Value.AsString())
				}
			}
		}
		require.Equal(t, []string{msg}, got, "the %s span records what the caller was told", r)
		require.True(t, strings.HasPrefix(msg, "sentinel: "), msg)
	}
	require.Equal(t, map[string]bool{"held": true, "stale": true}, seen)
}
