package sentineltest_test

import (
	"context"
	"github.com/jackc/pgx/v5"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// These examples have no "// Output:" comment, so go test compiles them
// but does not run them: the code they show is a TestMain or a test, which
// needs the *testing.M or *testing.T of a running test binary, and an
// example gets neither (testing.TB cannot be implemented outside package
// testing). The tests they show are run instead from copies in
// example_run_test.go (TestExamplesRun), which TestExamplesMatchTheirCopies
// keeps identical to them; ExampleMain's one call is run by this package's
// own TestMain (Run).

// In your package's main_test.go: one server for the whole test binary,
// stopped and deleted after the last test.
func ExampleMain() {
	var m *testing.M // TestMain's argument
	_ = func() {
		// func TestMain(m *testing.M) { sentineltest.Main(m) }
		sentineltest.Main(m)
	}
}

// A test gets a migrated client in a schema of its own, dropped when the
// test ends; parallel tests do not see each other's keys.
func ExampleNew() {
	_ = func(t *testing.T) { // func TestCharge(t *testing.T) {
		t.Parallel()
		client := sentineltest.New(t)
		res, err := sentinel.Once(context.Background(), client, "order-1",
			func(ctx context.Context) (string, error) { return "charged", nil })
		if err != nil || res.Value != "charged" {
			t.Fatal(res, err)
		}
	}
}

// Your own tables go in the test's schema too: Pool's search_path starts
// with it, so unqualified names land there and are dropped with it.
func ExamplePool() {
	_ = func(t *testing.T) {
		ctx := context.Background()
		pool := sentineltest.Pool(t)
		if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY)`); err != nil {
			t.Fatal(err)
		}
		client := sentineltest.New(t) // same schema, same pool
		_, err := sentinel.OnceTx(ctx, client, "order-1", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ('order-1')`)
			return 1, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
