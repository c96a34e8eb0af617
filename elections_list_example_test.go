package sentinel_test

import (
	"context"
	"fmt"

	"github.com/sentinel-coordination/sentinel"
)

// Every election group of the namespace with its leader, as
// `sentinel elections` prints them.
func ExampleClient_Elections() {
	client, done := exampleClient("example_elections")
	defer done()
	ctx, stop := context.WithCancel(context.Background())

	elected := make(chan int64, 1)
	el, err := client.Elector("billing", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) { elected <- term; <-ctx.Done() },
	})
	if err != nil {
		panic(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	term := <-elected

	groups, err := client.Elections(ctx, sentinel.ElectionFilter{})
	if err != nil {
		panic(err)
	}
	for _, g := range groups {
		fmt.Println(g.Group, "led in this term:", g.Leader != nil && g.Leader.Term == term, "members:", g.Members)
	}
	stop()
	<-ran
	// Output: billing led in this term: true members: 1
}
