package sentinel_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sentinel-coordination/sentinel"
)

// A queue ticket fences the printer's writes: VerifyTurn in the same
// transaction, refused once the turn is over.
func ExampleClient_VerifyTurn() {
	client, done := exampleClient("example_verify_turn")
	defer done()
	ctx := context.Background()
	pool := client.Pool()

	turn, err := client.Turn(ctx, "printer", sentinel.WithLabel("invoices"))
	if err != nil {
		panic(err)
	}
	check := func() error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		return client.VerifyTurn(ctx, tx, "printer", turn.Ticket())
	}
	fmt.Println("while served:", check())
	_ = turn.Release(ctx)
	fmt.Println("after release, stale:", errors.Is(check(), sentinel.ErrStaleToken))
	// Output:
	// while served: <nil>
	// after release, stale: true
}
