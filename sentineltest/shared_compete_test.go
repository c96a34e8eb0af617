package sentineltest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Several SharedSchema clients of one test are competing workers, as New
// documents for several calls in one test: they share the test's
// namespace (its own, not each client's), so a key one holds or completed
// is held or completed for the others. Before, each New call drew a
// namespace of its own, and the second worker of an exactly-once test ran
// fn again and took a lease the first one held.
func TestSharedSchemaClientsOfOneTestCompete(t *testing.T) {
	ctx := context.Background()
	a := sentineltest.New(t, sentineltest.SharedSchema())
	b := sentineltest.New(t, sentineltest.SharedSchema())
	if a.Config().Namespace != b.Config().Namespace {
		t.Fatalf("two clients of one test in namespaces %q and %q", a.Config().Namespace, b.Config().Namespace)
	}
	if _, err := sentinel.Once(ctx, a, "order-1", func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	res, err := sentinel.Once(ctx, b, "order-1", func(context.Context) (int, error) { return 2, nil })
	if err != nil || !res.Cached || res.Value != 1 {
		t.Fatalf("the second worker ran the key again: %+v, %v", res, err)
	}
	l, err := a.Lease(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()
	if _, err := b.Lease(ctx, "job"); !errors.Is(err, sentinel.ErrNotAcquired) {
		t.Fatalf("the second worker's Lease: %v, want held", err)
	}

	// Workers started on goroutines of the test share it too, and a client
	// configured with a namespace of its own stays apart from the others.
	var wg sync.WaitGroup
	nss := make([]string, 4)
	for i := range nss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nss[i] = sentineltest.New(t, sentineltest.SharedSchema()).Config().Namespace
		}()
	}
	wg.Wait()
	for _, ns := range nss {
		if ns != a.Config().Namespace {
			t.Fatalf("a worker goroutine's client in namespace %q, the test's is %q", ns, a.Config().Namespace)
		}
	}
	billing := sentineltest.New(t, sentineltest.SharedSchema(), sentineltest.WithConfig(sentinel.Config{Namespace: "billing"}))
	if billing.Config().Namespace == a.Config().Namespace {
		t.Fatal("a client configured with its own namespace joined the test's default one")
	}
	t.Run("subtest", func(t *testing.T) {
		if sub := sentineltest.New(t, sentineltest.SharedSchema()); sub.Config().Namespace == a.Config().Namespace {
			t.Fatal("a subtest shares its parent's namespace (without SharedSchema it has a schema of its own)")
		}
	})
}
