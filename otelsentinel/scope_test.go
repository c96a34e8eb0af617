package otelsentinel_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// The meter and the tracer carry the instrumentation scope's version, as
// OpenTelemetry's guidance for instrumentation libraries asks, so a
// dashboard can tell which release of Sentinel recorded a series. Before,
// both were created with the scope name only (an empty version).
func TestScopeHasVersion(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()
	obs, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(mp), otelsentinel.WithTracerProvider(tp))
	require.NoError(t, err)

	octx := obs.OnceStart(ctx, "default", "k")
	obs.OnceEnd(octx, sentinel.OnceEvent{Namespace: "default", Key: "k", Outcome: sentinel.OutcomeRan})
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	require.Equal(t, otelsentinel.ScopeName, rm.ScopeMetrics[0].Scope.Name)
	require.Equal(t, sentinel.Version, rm.ScopeMetrics[0].Scope.Version, "the meter's scope version")
	require.Len(t, spans.Ended(), 1)
	require.Equal(t, otelsentinel.ScopeName, spans.Ended()[0].InstrumentationScope().Name)
	require.Equal(t, sentinel.Version, spans.Ended()[0].InstrumentationScope().Version, "the tracer's scope version")
}
