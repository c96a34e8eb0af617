package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// An operator settles an uncertain key: inspect it, reconcile it (a new
// token, so a late completion by the old worker is refused), then record
// that the charge did happen. Later callers get the stored result.
func ExampleClient_Reconcile() {
	client, done := exampleClient("example_reconcile")
	defer done()
	ctx := context.Background()
	type Receipt struct {
		ChargeID string `json:"charge_id"`
	}
	charge := func(ctx context.Context) (Receipt, error) {
		return Receipt{}, errors.New("card network: read timeout") // sent, no answer
	}
	_, err := sentinel.Once(ctx, client, "charge-order-792", charge)
	fmt.Println("worker:", errors.Is(err, sentinel.ErrUncertain))

	exec, _ := client.Inspect(ctx, "charge-order-792")
	fmt.Println("inspect:", exec.State, "lease alive:", exec.LeaseAlive)
	rec, err := client.Reconcile(ctx, "charge-order-792", sentinel.WithToken(exec.Token))
	if err != nil {
		panic(err)
	}
	fmt.Println("reconcile:", rec.State, "new token:", rec.Token > exec.Token)
	// The card network shows ch_792: it happened.
	err = client.ForceComplete(ctx, "charge-order-792", Receipt{ChargeID: "ch_792"}, sentinel.WithToken(rec.Token))
	fmt.Println("force-complete:", err)

	res, err := sentinel.Once(ctx, client, "charge-order-792", charge)
	fmt.Println("next delivery:", res.Value.ChargeID, res.Cached, err)
	events, _ := client.History(ctx, "charge-order-792")
	for _, e := range events {
		fmt.Print(e.Type, " ")
	}
	fmt.Println()
	// Output:
	// worker: true
	// inspect: executing lease alive: false
	// reconcile: reconciling new token: true
	// force-complete: <nil>
	// next delivery: ch_792 true <nil>
	// claimed started failed reconciling force_completed
}

// Prune deletes what is older than the retention; a retention under
// MinRetention is refused, and nothing younger is touched.
func ExampleClient_Prune() {
	client, done := exampleClient("example_prune")
	defer done()
	ctx := context.Background()
	_, _ = sentinel.Once(ctx, client, "mail-welcome-1", func(context.Context) (string, error) { return "sent", nil })

	_, err := client.Prune(ctx, time.Minute)
	fmt.Println("a minute:", errors.Is(err, sentinel.ErrInvalid))
	res, err := client.Prune(ctx, 7*24*time.Hour, sentinel.WithAllNamespaces())
	fmt.Println("a week:", res.Executions, "executions pruned,", err)
	// Output:
	// a minute: true
	// a week: 0 executions pruned, <nil>
}

// LastRun reads what the history says about a key's current state (the
// run an operator settles), however many runs came before it; History with
// WithLimit reads only the newest events.
func ExampleClient_LastRun() {
	client, done := exampleClient("example_last_run")
	defer done()
	ctx := context.Background()
	for range 3 { // the card network is down: each delivery hands the key back
		_, _ = sentinel.Once(ctx, client, "charge-order-793", func(context.Context) (string, error) {
			return "", sentinel.Retryable(errors.New("card network: 503"))
		})
	}
	_, _ = sentinel.Once(ctx, client, "charge-order-793", func(context.Context) (string, error) { return "ch_793", nil })

	run, _ := client.LastRun(ctx, "charge-order-793")
	for i, e := range run {
		if i > 0 {
			fmt.Print(" ")
		}
		fmt.Print(e.Type)
	}
	fmt.Println()
	all, _ := client.History(ctx, "charge-order-793")
	newest, _ := client.History(ctx, "charge-order-793", sentinel.WithLimit(2))
	fmt.Println(len(all), "events in all; the newest two:", newest[0].Type, newest[1].Type)
	// Output:
	// claimed started completed
	// 12 events in all; the newest two: started completed
}
