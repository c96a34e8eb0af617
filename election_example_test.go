package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// A leader-only job: OnElected runs the scheduler with a ctx that ends
// before anyone else can lead; every write is guarded by the term.
func ExampleClient_Elector() {
	client, done := exampleClient("example_elector")
	defer done()
	ctx, stop := context.WithCancel(context.Background())

	elected := make(chan int64, 1)
	el, err := client.Elector("scheduler", sentinel.ElectorOptions{
		TTL:        3 * time.Second,
		AppVersion: "1.4.2",
		OnElected: func(ctx context.Context, term int64) {
			elected <- term
			<-ctx.Done() // run the scheduler until leadership ends
		},
		OnDemoted: func(term int64) { fmt.Println("demoted") },
	})
	if err != nil {
		panic(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()

	term := <-elected
	fmt.Println("leading:", el.IsLeader(), "term is a fencing token:", term == el.Term())
	l, _ := client.Leader(ctx, "scheduler")
	fmt.Println("leader's version:", l.AppVersion)

	// A write guarded by the term commits only while the term is current.
	tx, _ := client.Pool().Begin(ctx)
	fmt.Println("guarded write allowed:", client.VerifyTerm(ctx, tx, "scheduler", term) == nil)
	_ = tx.Rollback(ctx)

	stop() // Run resigns: OnElected's ctx ends, then the term is released
	fmt.Println("Run:", <-ran)
	_, err = client.Leader(context.Background(), "scheduler")
	fmt.Println("no leader:", errors.Is(err, sentinel.ErrNoLeader))
	// Output:
	// leading: true term is a fencing token: true
	// leader's version: 1.4.2
	// guarded write allowed: true
	// demoted
	// Run: <nil>
	// no leader: true
}

// The cluster view, as mongoelector's cluster_detail.
func ExampleClient_Members() {
	client, done := exampleClient("example_members")
	defer done()
	ctx, stop := context.WithCancel(context.Background())
	el, _ := client.Elector("reports", sentinel.ElectorOptions{AppVersion: "2.0.0"})
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	defer func() { stop(); <-ran }()
	for !el.IsLeader() {
		time.Sleep(10 * time.Millisecond)
	}
	members, _ := client.Members(ctx, "reports")
	for _, m := range members {
		fmt.Println(m.AppVersion, "leader:", m.Leader, "pid matches:", m.PID == client.Config().PID)
	}
	// Output:
	// 2.0.0 leader: true pid matches: true
}

// A service's main: the elector runs until SIGTERM, then resigns. Run
// returns once OnElected returned and the term was released, so waiting
// for it before client.Close and the process's exit hands leadership over
// in milliseconds; a term still held when the process exits is taken over
// only when it expires, a TTL later. Two clients stand for two replicas.
func ExampleElector_Run() {
	a, done := exampleClient("example_elector_run")
	defer done()
	b, err := sentinel.New(a.Pool(), &sentinel.Config{Schema: "example_elector_run"}) // another replica
	if err != nil {
		panic(err)
	}
	defer b.Close()

	const ttl = 30 * time.Second
	elected := make(chan string, 2)
	// serve is the body of each replica's main, after sentinel.New.
	serve := func(ctx context.Context, client *sentinel.Client, name string) error {
		el, err := client.Elector("scheduler", sentinel.ElectorOptions{
			TTL: ttl,
			OnElected: func(ctx context.Context, term int64) {
				elected <- name
				<-ctx.Done() // run the scheduler until leadership ends
			},
		})
		if err != nil {
			return err // ErrInvalid: a bad group, TTL or AppVersion
		}
		return el.Run(ctx) // returns once the term is released
	}

	// In main: ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	actx, sigterm := context.WithCancel(context.Background())
	aran := make(chan error, 1)
	go func() { aran <- serve(actx, a, "replica a") }()
	fmt.Println(<-elected, "leads")

	bctx, stopB := context.WithCancel(context.Background())
	bran := make(chan error, 1)
	go func() { bran <- serve(bctx, b, "replica b") }()
	for { // until replica b follows
		if m, _ := b.Members(bctx, "scheduler"); len(m) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	start := time.Now()
	sigterm()
	fmt.Println("replica a, Run:", <-aran) // then client.Close, and exit
	fmt.Println(<-elected, "leads, well within the TTL:", time.Since(start) < ttl/2)

	stopB()
	fmt.Println("replica b, Run:", <-bran)
	// Output:
	// replica a leads
	// replica a, Run: <nil>
	// replica b leads, well within the TTL: true
	// replica b, Run: <nil>
}
