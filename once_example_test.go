package sentinel_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sentinel-coordination/sentinel"
)

// Retryable says nothing happened: the key is handed back, not left
// uncertain, and the next delivery runs fn.
func ExampleRetryable() {
	client, done := exampleClient("example_retryable")
	defer done()
	ctx := context.Background()

	deliver := func(valid bool) {
		res, err := sentinel.Once(ctx, client, "charge-order-791", func(ctx context.Context) (string, error) {
			if !valid {
				return "", sentinel.Retryable(errors.New("order not priced yet")) // before the charge
			}
			return "ch_791", nil
		})
		fmt.Printf("value %q, retryable %v, uncertain %v\n", res.Value, sentinel.IsRetryable(err), errors.Is(err, sentinel.ErrUncertain))
	}
	deliver(false)
	deliver(true) // the redelivery runs fn
	// Output:
	// value "", retryable true, uncertain false
	// value "ch_791", retryable false, uncertain false
}

// Inside fn, the execution's token fences fn's own writes: the write
// commits only while this execution still owns the key.
func ExampleTokenFromContext() {
	client, done := exampleClient("example_exec_token")
	defer done()
	ctx := context.Background()
	pool := client.Pool()
	if _, err := pool.Exec(ctx, "CREATE TABLE example_exec_token.refunds (id text PRIMARY KEY)"); err != nil {
		panic(err)
	}

	_, err := sentinel.Once(ctx, client, "refund-7", func(ctx context.Context) (string, error) {
		token, _ := sentinel.TokenFromContext(ctx)
		tx, err := pool.Begin(ctx)
		if err != nil {
			return "", sentinel.Retryable(err)
		}
		defer tx.Rollback(ctx)
		if err := client.VerifyExecutionToken(ctx, tx, "refund-7", token); err != nil {
			return "", sentinel.Retryable(err) // another execution owns the key: write nothing
		}
		if _, err := tx.Exec(ctx, "INSERT INTO example_exec_token.refunds VALUES ('refund-7')"); err != nil {
			return "", err
		}
		return "refunded", tx.Commit(ctx)
	})
	fmt.Println("err:", err)
	// Output: err: <nil>
}
