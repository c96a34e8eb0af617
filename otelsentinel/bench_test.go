package otelsentinel_test

// Benchmarks of the observer's cost. They run only with -bench:
//
//	go test -run '^$' -bench . -benchtime 2000x ./otelsentinel
//
// Each benchmark compares, on the same database, a client without an
// observer ("none"), one with otelsentinel on the no-op providers ("noop":
// what a program that never configures OpenTelemetry pays) and one on the
// SDK with an in-memory reader and a span recorder ("sdk"). Targets: "noop"
// within noise of "none" in ns/op; "none" allocating what the core
// allocated before the hook existed.

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

type benchReceipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func benchCharge(context.Context) (benchReceipt, error) {
	return benchReceipt{ID: "pay_1", Amount: 9900}, nil
}

// benchObservers are the three configurations compared.
func benchObservers(b *testing.B) []struct {
	name string
	obs  *sentinel.Observer
} {
	noop, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelsentinel.WithTracerProvider(tracenoop.NewTracerProvider()))
	if err != nil {
		b.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	b.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	sdk, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(mp), otelsentinel.WithTracerProvider(tp))
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		obs  *sentinel.Observer
	}{{"none", nil}, {"noop", noop}, {"sdk", sdk}}
}

// benchClient returns a migrated client with obs in a schema of its own.
func benchClient(b *testing.B, obs *sentinel.Observer) *sentinel.Client {
	b.Helper()
	ctx := context.Background()
	schema := "otelb_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_")
	b.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	p, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema, Observer: obs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	if err := c.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkOnceReplay: a completed key replayed (one statement per call).
func BenchmarkOnceReplay(b *testing.B) {
	for _, o := range benchObservers(b) {
		b.Run(o.name, func(b *testing.B) {
			c := benchClient(b, o.obs)
			ctx := context.Background()
			if _, err := sentinel.Once(ctx, c, "k", benchCharge); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := sentinel.Once(ctx, c, "k", benchCharge); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkOnceFresh: a new key per call (claim, run, complete).
func BenchmarkOnceFresh(b *testing.B) {
	for _, o := range benchObservers(b) {
		b.Run(o.name, func(b *testing.B) {
			c := benchClient(b, o.obs)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := sentinel.Once(ctx, c, "k"+strconv.Itoa(i), benchCharge); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLeaseAcquireRelease: one acquire and one release per op.
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	for _, o := range benchObservers(b) {
		b.Run(o.name, func(b *testing.B) {
			c := benchClient(b, o.obs)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				l, err := c.Lease(ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
