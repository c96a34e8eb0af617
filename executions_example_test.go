package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// An operator's loop over every uncertain execution of every namespace,
// a page at a time.
func ExampleClient_Executions() {
	client, done := exampleClient("example_executions")
	defer done()
	ctx := context.Background()
	for _, key := range []string{"payment-1", "payment-2", "payment-3"} {
		_, _ = sentinel.Once(ctx, client, key, func(context.Context) (int, error) {
			return 0, errors.New("worker lost track") // leaves the key uncertain
		})
	}

	cursor := ""
	for {
		page, next, err := client.Executions(ctx, sentinel.ExecutionFilter{
			Uncertain: true, AllNamespaces: true, Limit: 2, After: cursor,
		})
		if err != nil {
			panic(err)
		}
		for _, e := range page {
			fmt.Println(e.Namespace, e.Key, e.State, "lease alive:", e.LeaseAlive)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	// Output:
	// default payment-1 executing lease alive: false
	// default payment-2 executing lease alive: false
	// default payment-3 executing lease alive: false
}

// Following a key's events live, as a console or an alerting job would.
func ExampleClient_Follow() {
	client, done := exampleClient("example_follow")
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Another worker sends the invoice once the follower is in position
	// (OnStart), so the follower sees every event of it.
	send := func() {
		go func() {
			_, _ = sentinel.Once(ctx, client, "invoice-7", func(context.Context) (string, error) { return "sent", nil })
		}()
	}
	n := 0
	err := client.Follow(ctx, sentinel.FollowFilter{Keys: []string{"invoice-7"}, OnStart: send}, func(e sentinel.Event) error {
		fmt.Println(e.Key, e.Type, e.State)
		if n++; n == 3 {
			return errors.New("seen enough")
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// invoice-7 claimed claimed
	// invoice-7 started executing
	// invoice-7 completed completed
	// seen enough
}
