package otelsentinel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// With WithoutKeys no span and no span event carries sentinel.key; by
// default both do.
func TestWithoutKeysLeavesKeysOffSpans(t *testing.T) {
	hasKey := func(attrs []attribute.KeyValue) bool {
		for _, a := range attrs {
			if a.Key == otelsentinel.AttrKey {
				return true
			}
		}
		return false
	}
	for _, without := range []bool{false, true} {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		opts := []otelsentinel.Option{otelsentinel.WithTracerProvider(tp), otelsentinel.WithMeterProvider(mp)}
		if without {
			opts = append(opts, otelsentinel.WithoutKeys())
		}
		obs, err := otelsentinel.NewObserver(opts...)
		require.NoError(t, err)

		ctx := obs.OnceStart(context.Background(), "ns", "POST /charges|alice|key-1")
		obs.FencingRefused(ctx, sentinel.FencingRefusal{Namespace: "ns", Key: "POST /charges|alice|key-1", Token: 1, Current: 2})
		obs.OnceEnd(ctx, sentinel.OnceEvent{Namespace: "ns", Key: "POST /charges|alice|key-1", Outcome: sentinel.OutcomeRan})
		ctx = obs.LeaseStart(context.Background(), "ns", "job-1")
		obs.LeaseEnd(ctx, sentinel.LeaseEvent{Namespace: "ns", Key: "job-1", Acquired: true, Token: 3})

		ended := spans.Ended()
		require.Len(t, ended, 2)
		for _, s := range ended {
			require.Equal(t, !without, hasKey(s.Attributes()), "span %s, WithoutKeys %v", s.Name(), without)
			for _, ev := range s.Events() {
				require.Equal(t, !without, hasKey(ev.Attributes), "event %s, WithoutKeys %v", ev.Name, without)
			}
		}
		require.Len(t, ended[0].Events(), 1, "the fencing refusal's event")
	}
}
