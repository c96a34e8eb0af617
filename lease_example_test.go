package sentinel_test

import (
	"context"
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
	h := lease.Handle() // {Namespace, Key, Owner, Token}: send it to the worker as JSON
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
