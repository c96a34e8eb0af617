package otelsentinel_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// A Once whose fn returned but whose value could not be stored completes
// the key without its result: every caller gets ErrResult until an
// operator stores the value (SetResult). Before, that call and each replay
// of the key counted as outcome "error", with bad input and database
// errors, so an SRE could not alert on the one case that needs a person.
// They count as "result_lost" now; a stored result that does not decode
// into the caller's type (the caller's bug, nothing lost) stays "error".
func TestResultLostOutcome(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(nil)
	nan := func(context.Context) (float64, error) { return math.NaN(), nil }
	for range 2 { // the run, then a replay of the key without its result
		_, err := sentinel.Once(ctx, c, "charge", nan)
		require.ErrorIs(t, err, sentinel.ErrResult)
	}
	_, err := sentinel.Once(ctx, c, "fine", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, c, "fine", func(context.Context) (struct{ A int }, error) { return struct{ A int }{}, nil })
	require.ErrorIs(t, err, sentinel.ErrResult, "a stored 1 does not decode into a struct")

	m := w.metrics()
	require.Equal(t, map[string]int64{"result_lost": 2, "ran": 1, "error": 1},
		sumBy(t, m["sentinel.once.calls"], otelsentinel.AttrOutcome))
	var spans []sdktrace.ReadOnlySpan
	for _, s := range w.spans.Ended() {
		if s.Name() == "sentinel.Once" {
			spans = append(spans, s)
		}
	}
	require.Len(t, spans, 4)
	for _, s := range spans[:2] {
		require.Equal(t, "result_lost", spanAttr(s, otelsentinel.AttrOutcome).AsString())
		require.Equal(t, codes.Error, s.Status().Code)
	}
}
