package sentinel_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// An Observer with two hooks: count uncertain outcomes and report lost
// leases, for a system other than OpenTelemetry (package otelsentinel
// implements all of them with OpenTelemetry).
func ExampleObserver() {
	uncertain := 0
	obs := &sentinel.Observer{
		OnceEnd: func(ctx context.Context, e sentinel.OnceEvent) {
			if e.Outcome == sentinel.OutcomeUncertain {
				uncertain++ // alert: an operator must reconcile e.Namespace/e.Key
			}
		},
		LeaseLost: func(e sentinel.LeaseLoss) {
			fmt.Printf("lost %s/%s (token %d): %v\n", e.Namespace, e.Key, e.Token, e.Err)
		},
	}
	client, done := exampleClientWith("example_observer", &sentinel.Config{Observer: obs})
	defer done()
	ctx := context.Background()

	_, err := sentinel.Once(ctx, client, "webhook-42", func(context.Context) (int, error) {
		return 0, fmt.Errorf("connection reset while posting")
	})
	fmt.Println(err != nil, uncertain)
	// Output:
	// true 1
}

// exampleClientWith is exampleClient with a configuration.
func exampleClientWith(schema string, cfg *sentinel.Config) (*sentinel.Client, func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	c := *cfg
	c.Schema = schema
	client, err := sentinel.New(pool, &c)
	if err != nil {
		panic(err)
	}
	if err := client.Migrate(ctx); err != nil {
		panic(err)
	}
	return client, func() {
		client.Close()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	}
}
