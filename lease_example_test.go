package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sentinel-coordination/sentinel"
)

// Who holds a key, read without taking it; and every lease held in the
// namespace.
func ExampleClient_Holder() {
	client, done := exampleClient("example_holder")
	defer done()
	ctx := context.Background()

	_, err := client.Holder(ctx, "invoice-124")
	fmt.Println("nobody:", errors.Is(err, sentinel.ErrNotFound))
	lease, err := client.Lease(ctx, "invoice-124")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	h, _ := client.Holder(ctx, "invoice-124")
	fmt.Println("holder is this client:", h.Owner == client.Owner(), "token:", h.Token == lease.Token())
	all, _ := client.Leases(ctx, sentinel.LeaseFilter{})
	fmt.Println("leases held:", len(all))
	// Output:
	// nobody: true
	// holder is this client: true token: true
	// leases held: 1
}

// A lease acquired by one process (a dispatcher) and renewed and released
// by another (its worker), by plain values; a stale handle is refused.
func ExampleLease_Handle() {
	client, done := exampleClient("example_handle")
	defer done()
	ctx := context.Background()

	lease, err := client.Lease(ctx, "shard-3", sentinel.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	// {Namespace, Key, Owner, Token}: send it to the worker as JSON.
	// Detach, not Handle alone: this client stops renewing it.
	h, err := lease.Detach()
	if err != nil {
		panic(err)
	}
	_, err = client.RenewHandle(ctx, h, 10*time.Second)
	fmt.Println("renewed:", err)
	fmt.Println("released:", client.ReleaseHandle(ctx, h))

	again, err := client.Lease(ctx, "shard-3") // a newer grant
	if err != nil {
		panic(err)
	}
	defer again.Release(ctx)
	_, err = client.RenewHandle(ctx, h, 10*time.Second) // the old handle
	fmt.Println("stale:", errors.Is(err, sentinel.ErrStaleToken))
	// Output:
	// renewed: <nil>
	// released: <nil>
	// stale: true
}

// A dispatcher hands a job's lease to a worker in another process: Detach
// stops the dispatcher's renewals without releasing the row, and the
// worker takes the lease up with AdoptHandle, as a Lease of its own:
// renewed by its heartbeat, named after it, with a new token that makes
// the dispatcher's stale. Were the worker to die, the key would free by
// itself within its TTL.
func ExampleLease_Detach() {
	dispatcher, done := exampleClient("example_detach")
	defer done()
	worker, err := sentinel.New(dispatcher.Pool(), &sentinel.Config{Schema: "example_detach"}) // another process
	if err != nil {
		panic(err)
	}
	defer worker.Close()
	ctx := context.Background()

	// The dispatcher: take the job, hand it on.
	lease, err := dispatcher.Lease(ctx, "job-42", sentinel.WithTTL(5*time.Second))
	if err != nil {
		panic(err)
	}
	h, err := lease.Detach()
	if err != nil {
		panic(err) // lost before it could be handed on: dispatch again
	}
	msg, _ := json.Marshal(h) // onto the job queue, say
	fmt.Println("dispatcher:", lease.Err())
	fmt.Println("dispatcher's Release frees nothing:", errors.Is(lease.Release(ctx), sentinel.ErrDetached))

	// The worker: take the lease up at once, work under it, release it.
	var job sentinel.LeaseHandle
	if err := json.Unmarshal(msg, &job); err != nil {
		panic(err)
	}
	l, err := worker.AdoptHandle(ctx, job, sentinel.WithTTL(5*time.Second))
	if err != nil {
		panic(err) // ErrStaleToken: it expired in transit, do not start
	}
	// Work under l.Context(ctx) (cancelled if the lease is lost),
	// fencing the writes with l.Token(); this client renews the lease.
	holder, _ := worker.Holder(ctx, "job-42")
	fmt.Println("the key names the worker:", holder.Owner == worker.Owner(), holder.Token == l.Token())
	stale := dispatcher.VerifyToken(ctx, dispatcher.Pool(), "job-42", job.Token)
	fmt.Println("the dispatcher's token is stale:", errors.Is(stale, sentinel.ErrStaleToken))
	fmt.Println("worker released:", l.Release(ctx))
	// Output:
	// dispatcher: sentinel: lease detached
	// dispatcher's Release frees nothing: true
	// the key names the worker: true true
	// the dispatcher's token is stale: true
	// worker released: <nil>
}
