package sentinel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sentinel-coordination/sentinel"
)

// OnceRetry rides out a flaky dependency (fn says nothing happened with
// Retryable) and a key in progress elsewhere, with jittered backoff; an
// uncertain outcome is returned at once, never retried.
func ExampleOnceRetry() {
	client, done := exampleClient("example_once_retry")
	defer done()
	ctx := context.Background()

	attempts := 0
	res, err := sentinel.OnceRetry(ctx, client, "invoice-42",
		func(ctx context.Context) (string, error) {
			attempts++
			if attempts < 3 {
				// Nothing was sent: safe to run again.
				return "", sentinel.Retryable(errors.New("mail server busy"))
			}
			return "invoice mailed", nil
		},
		sentinel.RetryOptions{MaxAttempts: 5, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second})
	var gaveUp *sentinel.RetryError
	switch {
	case errors.As(err, &gaveUp):
		fmt.Println("still busy after", gaveUp.Attempts, "attempts")
	case errors.Is(err, sentinel.ErrUncertain):
		fmt.Println("outcome unknown: reconcile, do not retry")
	case err != nil:
		fmt.Println("error:", err)
	default:
		fmt.Printf("%s after %d attempts\n", res.Value, attempts)
	}
	// Output: invoice mailed after 3 attempts
}

// Retry works for any function whose errors follow Sentinel's conventions.
func ExampleRetry() {
	calls := 0
	err := sentinel.Retry(context.Background(), sentinel.RetryOptions{MaxAttempts: 3, BaseDelay: time.Millisecond},
		func(ctx context.Context) error {
			calls++
			return sentinel.Retryable(errors.New("not yet"))
		})
	fmt.Println(calls, "calls:", err != nil, errors.As(err, new(*sentinel.RetryError)))
	// Output: 3 calls: true true
}

// database/sql code (sqlc, sqlx, ent, GORM) shares the client's pgx pool
// through pgx's stdlib adapter, and OnceSQLTx commits its writes together
// with the completion: the order is booked exactly once.
func ExampleOnceSQLTx() {
	client, done := exampleClient("example_sqltx")
	defer done()
	ctx := context.Background()

	db := stdlib.OpenDBFromPool(client.Pool()) // database/sql over the same pool
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE example_sqltx.orders (id text PRIMARY KEY, cents int NOT NULL)`); err != nil {
		panic(err)
	}

	book := func() {
		res, err := sentinel.OnceSQLTx(ctx, client, db, "order-1001",
			func(ctx context.Context, tx *sql.Tx) (string, error) {
				// Your database/sql code, e.g. sqlc's queries.WithTx(tx).
				_, err := tx.ExecContext(ctx, `INSERT INTO example_sqltx.orders (id, cents) VALUES ($1, $2)`, "order-1001", 4200)
				return "booked", err
			})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%s (cached: %v)\n", res.Value, res.Cached)
	}
	book()
	book()

	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM example_sqltx.orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// booked (cached: false)
	// booked (cached: true)
	// orders: 1
}
