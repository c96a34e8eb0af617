package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// exampleClient returns a migrated client in a schema of its own.
func exampleClient(schema string) (*sentinel.Client, func()) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := client.Migrate(ctx); err != nil {
		panic(err)
	}
	return client, func() {
		client.Close()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	}
}

// Once around a payment handler: the first delivery charges, every later
// delivery gets the stored receipt.
func ExampleOnce() {
	client, done := exampleClient("example_once")
	defer done()
	ctx := context.Background()

	type Receipt struct{ PaymentID string }
	handle := func() {
		res, err := sentinel.Once(ctx, client, "payment-order-789",
			func(ctx context.Context) (Receipt, error) {
				fmt.Println("charging the card")
				return Receipt{PaymentID: "pay_123"}, nil
			},
			sentinel.WithTTL(3*time.Second), sentinel.WithHardTTL(30*time.Second))
		switch {
		case errors.Is(err, sentinel.ErrInProgress):
			fmt.Println("another worker is on it; redeliver later")
		case errors.Is(err, sentinel.ErrUncertain):
			fmt.Println("outcome unknown: reconcile before retrying")
		case err != nil:
			fmt.Println("error:", err)
		default:
			fmt.Printf("receipt %s (cached: %v)\n", res.Value.PaymentID, res.Cached)
		}
	}
	handle()
	handle() // a duplicate delivery
	// Output:
	// charging the card
	// receipt pay_123 (cached: false)
	// receipt pay_123 (cached: true)
}

// A lease in a job loop: acquire, work while Done is open, release.
func ExampleClient_Lease() {
	client, done := exampleClient("example_lease")
	defer done()
	ctx := context.Background()

	lease, err := client.Lease(ctx, "invoice-123", sentinel.WithTTL(3*time.Second))
	if errors.Is(err, sentinel.ErrNotAcquired) {
		fmt.Println("someone else has it")
		return
	}
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	work, cancel := lease.Context(ctx) // cancelled if the lease is lost
	defer cancel()
	select {
	case <-work.Done():
		fmt.Println("lease lost:", lease.Err())
	default:
		fmt.Println("holding invoice-123 with a fencing token:", lease.Token() > 0)
	}

	_, err = client.Lease(ctx, "invoice-123")
	fmt.Println("second acquire refused:", errors.Is(err, sentinel.ErrNotAcquired))
	// Output:
	// holding invoice-123 with a fencing token: true
	// second acquire refused: true
}

// The fencing check inside the caller's own transaction: the write commits
// only while the token is current.
func ExampleClient_VerifyToken() {
	client, done := exampleClient("example_fence")
	defer done()
	ctx := context.Background()
	pool := client.Pool()

	lease, err := client.Lease(ctx, "account-42")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback(ctx)
	if err := client.VerifyToken(ctx, tx, "account-42", lease.Token()); err != nil {
		fmt.Println("stale holder, writing nothing:", err)
		return
	}
	// ... guarded writes with tx ...
	fmt.Println("token current, committing:", tx.Commit(ctx) == nil)

	_ = lease.Release(ctx)
	err = client.VerifyToken(ctx, pool, "account-42", lease.Token())
	fmt.Println("token refused after release:", errors.Is(err, sentinel.ErrStaleToken))
	// Output:
	// token current, committing: true
	// token refused after release: true
}

// OnceTx for work inside the same database: the ledger row and the
// completion commit together, so the entry is booked exactly once.
func ExampleOnceTx() {
	client, done := exampleClient("example_oncetx")
	defer done()
	ctx := context.Background()
	pool := client.Pool()
	if _, err := pool.Exec(ctx, "CREATE TABLE example_oncetx.ledger (entry text PRIMARY KEY, cents int)"); err != nil {
		panic(err)
	}
	book := func() {
		res, err := sentinel.OnceTx(ctx, client, "refund-42", func(ctx context.Context, tx pgx.Tx) (int, error) {
			_, err := tx.Exec(ctx, "INSERT INTO example_oncetx.ledger VALUES ('refund-42', -1500)")
			return -1500, err
		})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("booked %d (cached: %v)\n", res.Value, res.Cached)
	}
	book()
	book()
	var n int
	_ = pool.QueryRow(ctx, "SELECT count(*) FROM example_oncetx.ledger").Scan(&n)
	fmt.Println("ledger rows:", n)
	// Output:
	// booked -1500 (cached: false)
	// booked -1500 (cached: true)
	// ledger rows: 1
}

// A declined card is an outcome, not a doubt: Final stores it, and every
// redelivery gets the same answer without charging again.
func ExampleFinal() {
	client, done := exampleClient("example_final")
	defer done()
	ctx := context.Background()

	charge := func(ctx context.Context) (string, error) {
		fmt.Println("asking the card network")
		return "", sentinel.Final(errors.New("card declined"))
	}
	for range 2 {
		_, err := sentinel.Once(ctx, client, "payment-order-790", charge)
		var fe *sentinel.FinalError
		if errors.As(err, &fe) {
			fmt.Println("final outcome:", fe.Message)
		}
	}
	// Output:
	// asking the card network
	// final outcome: card declined
	// final outcome: card declined
}

// Concurrent deliveries of one event wait for the first one's result
// instead of failing with ErrInProgress.
func ExampleWithWait_once() {
	client, done := exampleClient("example_wait")
	defer done()
	ctx := context.Background()

	results := make(chan sentinel.Result[string], 3)
	for range 3 {
		go func() {
			res, err := sentinel.Once(ctx, client, "webhook-evt-1", func(ctx context.Context) (string, error) {
				time.Sleep(100 * time.Millisecond)
				return "processed", nil
			}, sentinel.WithWait())
			if err != nil {
				panic(err)
			}
			results <- res
		}()
	}
	cached := 0
	for range 3 {
		if (<-results).Cached {
			cached++
		}
	}
	fmt.Println("ran once, cached", cached)
	// Output: ran once, cached 2
}

// Do holds a lease while fn runs, like pgx.BeginFunc for leases.
func ExampleClient_Do() {
	client, done := exampleClient("example_do")
	defer done()
	ctx := context.Background()

	err := client.Do(ctx, "nightly-report", func(ctx context.Context, l *sentinel.Lease) error {
		fmt.Println("building the report with token", l.Token())
		return nil // ctx is cancelled if the lease is lost
	}, sentinel.WithWait())
	fmt.Println("err:", err)
	// Output:
	// building the report with token 1
	// err: <nil>
}
