package otelsentinel_test

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// Wire the observer into a client: every Once and lease acquisition is then
// counted, timed and traced. Here the metrics go to an in-memory reader; in
// a service, pass your MeterProvider and TracerProvider (or set the global
// ones and call NewObserver without options).
func ExampleNewObserver() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	obs, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_otel CASCADE")
	defer func() { _, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_otel CASCADE") }()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: "example_otel", Observer: obs})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		panic(err)
	}

	for range 3 { // one run, two replays
		_, _ = sentinel.Once(ctx, client, "payment-1", func(context.Context) (string, error) { return "pay_1", nil })
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "sentinel.once.calls" {
			continue
		}
		var lines []string
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			outcome, _ := dp.Attributes.Value(otelsentinel.AttrOutcome)
			lines = append(lines, fmt.Sprintf("%s{outcome=%s} %d", m.Name, outcome.AsString(), dp.Value))
		}
		sort.Strings(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
	}
	// Output:
	// sentinel.once.calls{outcome=cached} 2
	// sentinel.once.calls{outcome=ran} 1
}
