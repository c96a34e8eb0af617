package sentineltest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// The package documentation states the test pool's size (4 connections)
// and that a test running more transactions at once than that allows gets
// a larger pool with WithPoolConfig: this runs what it says, with 6
// OnceTx calls inside their fn at the same time (each waits for the
// others), which the default pool cannot hold.
func TestPoolSizeAsDocumented(t *testing.T) {
	if got := sentineltest.Pool(t).Config().MaxConns; got != 4 {
		t.Fatalf("the test's pool has MaxConns %d; the package documentation says 4", got)
	}
	client := sentineltest.New(t, sentineltest.WithPoolConfig(func(c *pgxpool.Config) { c.MaxConns = 16 }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const workers = 6
	var inside sync.WaitGroup
	inside.Add(workers)
	errs := make(chan error, workers)
	for i := range workers {
		go func() {
			_, err := sentinel.OnceTx(ctx, client, fmt.Sprint("charge-", i), func(ctx context.Context, tx pgx.Tx) (int, error) {
				inside.Done()
				all := make(chan struct{})
				go func() { inside.Wait(); close(all) }()
				select {
				case <-all:
					return i, nil
				case <-ctx.Done():
					return 0, ctx.Err()
				}
			})
			errs <- err
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
