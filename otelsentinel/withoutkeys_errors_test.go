package otelsentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// WithoutKeys promises keys a trace backend must not keep stay off the
// spans and their events. The error events (exception.message) recorded
// on a held Lease span and an uncertain Once span carried the key all the
// same: a HeldError and an ExecutionError name it (%q, and the `sentinel
// inspect` command line). With WithoutKeys they are recorded with the key
// withheld; the rest of the message stays, and exception.type is the
// error's.
func TestWithoutKeysWithholdsKeysInErrorEvents(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := otelsentinel.NewObserver(otelsentinel.WithTracerProvider(tp), otelsentinel.WithMeterProvider(mp),
		otelsentinel.WithoutKeys())
	require.NoError(t, err)
	c := w.client(&sentinel.Config{Observer: obs})
	other := w.client(nil)

	const leaseKey, onceKey = "POST /charges|alice|idem-7f3a", "POST /refunds|bob|idem-91c2"
	l, err := other.Lease(ctx, leaseKey)
	require.NoError(t, err)
	defer l.Release(ctx)
	_, err = c.Lease(ctx, leaseKey)
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	require.Contains(t, err.Error(), leaseKey)
	for range 2 { // uncertain, then rejected as uncertain
		_, err = sentinel.Once(ctx, c, onceKey, func(context.Context) (int, error) { return 0, errors.New("boom") })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.Contains(t, err.Error(), onceKey)
	}

	ended := spans.Ended()
	require.Len(t, ended, 3)
	events := 0
	for _, s := range ended {
		for _, ev := range s.Events() {
			events++
			for _, kv := range ev.Attributes {
				v := kv.Value.String()
				for _, key := range []string{leaseKey, onceKey, "idem-"} {
					require.NotContains(t, v, key, "span %s, event %s, attribute %s", s.Name(), ev.Name, kv.Key)
				}
				if kv.Key == "exception.message" {
					require.True(t, strings.HasPrefix(v, "sentinel: "), v)
					require.Contains(t, v, `"<key withheld>"`)
				}
				if kv.Key == "exception.type" {
					require.Contains(t, []string{"*sentinel.HeldError", "*sentinel.ExecutionError"}, v)
				}
			}
		}
	}
	require.Equal(t, 3, events, "each span records what the caller was told")
}
