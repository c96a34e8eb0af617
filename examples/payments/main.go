// Command payments is Sentinel's demo: several workers race over a batch of
// payments, each delivered to every worker (as an at-least-once queue
// would). Each payment must be charged exactly once. One worker process
// crashes in the middle of a charge; the demo shows that payment surface as
// uncertain instead of being charged again, and resolves it the way an
// operator would: by checking the card network and reconciling.
//
//	go run ./examples/payments
//
// It uses $DATABASE_URL when set, otherwise a throwaway PostgreSQL
// started for the run (from local server binaries, else in a Docker
// container).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

const schema = "sentinel_payments_demo"

// Receipt is what charging a payment returns, and what Sentinel replays.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Payment  string `json:"payment"`
	Amount   int    `json:"amount_cents"`
	Worker   string `json:"worker"`
}

func main() {
	payments := flag.Int("payments", 40, "payments in the batch")
	workers := flag.Int("workers", 4, "competing workers")
	flag.Parse()
	log.SetFlags(0)
	if os.Getenv("PAYMENTS_DEMO_CRASHER") != "" {
		crasher()
		return
	}
	if err := run(*payments, *workers); err != nil {
		log.Fatalf("payments demo: %v", err)
	}
}

func run(nPayments, nWorkers int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	where := "$DATABASE_URL"
	if os.Getenv("DATABASE_URL") == "" {
		where = "a throwaway PostgreSQL started for this run"
	}
	fmt.Printf("Sentinel payments demo: %d payments, %d workers, every payment delivered to every worker\n", nPayments, nWorkers)
	fmt.Printf("database: %s\n\n", where)
	url, cleanup, err := testdb.DemoURL(ctx, func(string, ...any) {})
	if err != nil {
		return err
	}
	defer cleanup()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return err
	}

	// 1. A worker process starts charging payment-0007 and is killed
	//    before it can record the outcome.
	crashed := fmt.Sprintf("payment-%04d", min(7, nPayments))
	pid, err := crash(ctx, url, crashed)
	if err != nil {
		return err
	}
	fmt.Printf("worker-crash (pid %d) charged %s and was killed (SIGKILL) before recording it\n", pid, crashed)

	// 2. The workers race over the whole batch. With WithWait a worker
	//    that finds a payment in progress elsewhere waits for its receipt
	//    instead of failing.
	type tally struct{ ran, cached, uncertain int }
	type outcome struct {
		chargedBy              string
		replayed, sawUncertain int
	}
	var mu sync.Mutex
	perWorker := make([]tally, nWorkers)
	perPayment := map[string]*outcome{}
	uncertain := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, nWorkers)
	start := time.Now()
	for w := range nWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("worker-%d", w+1)
			client, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "payments", DefaultTTL: 2 * time.Second})
			if err != nil {
				errs <- err
				return
			}
			defer client.Close()
			for _, key := range deliveries(nPayments, w) {
				res, err := sentinel.Once(ctx, client, key, func(ctx context.Context) (Receipt, error) {
					return charge(ctx, pool, key, name)
				}, sentinel.WithWait())
				mu.Lock()
				o := perPayment[key]
				if o == nil {
					o = &outcome{}
					perPayment[key] = o
				}
				switch {
				case err == nil && res.Cached:
					perWorker[w].cached++
					o.replayed++
				case err == nil:
					perWorker[w].ran++
					o.chargedBy = name
				case errors.Is(err, sentinel.ErrUncertain):
					perWorker[w].uncertain++
					o.sawUncertain++
					uncertain[key] = true
				default:
					mu.Unlock()
					errs <- fmt.Errorf("%s on %s: %w", name, key, err)
					return
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	fmt.Printf("\n%d workers handled %d deliveries (%d payments x %d) in %s.\n", nWorkers, nPayments*nWorkers, nPayments, nWorkers,
		time.Since(start).Round(time.Millisecond))
	var ran, chargedOnce int
	for _, o := range perPayment {
		if o.chargedBy != "" && o.replayed == nWorkers-1 {
			chargedOnce++
		}
	}
	var keys []string
	for k := range uncertain {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("\nWhat happened to each payment:\n")
	fmt.Printf("  %2d charged once by a worker; the other %d workers got the stored receipt\n", chargedOnce, nWorkers-1)
	for _, k := range keys {
		fmt.Printf("  %2d %s: charged by worker-crash, which died before recording it; all %d workers found it\n"+
			"     uncertain and refused to charge it again\n", 1, k, perPayment[k].sawUncertain)
	}
	if other := nPayments - chargedOnce - len(keys); other != 0 {
		fmt.Printf("  %2d other (see the table)\n", other)
	}
	fmt.Printf("\nPer worker (deliveries):\n  %-10s %8s %8s %14s\n", "worker", "charged", "replayed", "saw uncertain")
	for w, t := range perWorker {
		fmt.Printf("  %-10s %8d %8d %14d\n", fmt.Sprintf("worker-%d", w+1), t.ran, t.cached, t.uncertain)
		ran += t.ran
	}

	// 3. What the card network saw.
	var charges, dups int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT payment) FROM `+schema+`.card_charges`).Scan(&charges, &dups); err != nil {
		return err
	}
	fmt.Printf("\ncard network: %d charges for %d payments, %d charged twice\n", charges, nPayments, dups)
	fmt.Printf("uncertain, left for an operator (never charged again): %s\n", strings.Join(keys, ", "))

	// 4. The operator reconciles: the card network shows whether the
	//    charge happened.
	op, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "payments", Owner: "operator-alice"})
	if err != nil {
		return err
	}
	defer op.Close()
	for _, key := range keys {
		ex, err := op.Reconcile(ctx, key, sentinel.WithMetadata(map[string]any{"reason": "worker crashed mid-charge"}))
		if err != nil {
			return err
		}
		var r Receipt
		err = pool.QueryRow(ctx, `SELECT charge_id, payment, amount, worker FROM `+schema+`.card_charges WHERE payment = $1`, key).
			Scan(&r.ChargeID, &r.Payment, &r.Amount, &r.Worker)
		switch {
		case err == nil:
			fmt.Printf("\nreconcile %s (token %d): card network has %s -> ForceComplete\n", key, ex.Token, r.ChargeID)
			if err := op.ForceComplete(ctx, key, r, sentinel.WithToken(ex.Token)); err != nil {
				return err
			}
		case errors.Is(err, pgx.ErrNoRows):
			fmt.Printf("\nreconcile %s (token %d): no charge at the card network -> ResetToClaimed\n", key, ex.Token)
			if err := op.ResetToClaimed(ctx, key, sentinel.WithToken(ex.Token)); err != nil {
				return err
			}
		default:
			return err
		}
		res, err := sentinel.Once(ctx, op, key, func(ctx context.Context) (Receipt, error) {
			return charge(ctx, pool, key, "operator-alice")
		})
		if err != nil {
			return err
		}
		fmt.Printf("next delivery of %s: cached=%v receipt=%s\n", key, res.Cached, res.Value.ChargeID)
		hist, err := op.History(ctx, key)
		if err != nil {
			return err
		}
		fmt.Printf("history of %s:\n", key)
		for _, ev := range hist {
			fmt.Printf("  %s  %-16s %-12s token %-4d %s\n", ev.At.Format("15:04:05.000"), ev.Type, ev.State, ev.Token, ev.Owner)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT payment) FROM `+schema+`.card_charges`).Scan(&charges, &dups); err != nil {
		return err
	}
	verdict := "OK: every payment charged exactly once"
	if charges != nPayments || dups != 0 {
		verdict = "FAILED: charges do not match payments"
	}
	fmt.Printf("\nfinal: %d payments, %d charges, %d duplicates, fn ran %d times in workers -> %s\n", nPayments, charges, dups, ran, verdict)
	if charges != nPayments || dups != 0 {
		return errors.New(verdict)
	}
	return nil
}

// setup creates a fresh demo schema and the simulated card network's table.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		return err
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: schema})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE `+schema+`.card_charges (
		charge_id text PRIMARY KEY DEFAULT 'ch_' || substr(md5(random()::text), 1, 12),
		payment text NOT NULL, amount int NOT NULL, worker text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	return err
}

// charge is the side effect: a call to the "card network" (its own
// autocommit statement, outside Sentinel's control, like an HTTP call).
func charge(ctx context.Context, pool *pgxpool.Pool, payment, worker string) (Receipt, error) {
	amount := 1000 + len(payment)*37
	time.Sleep(5 * time.Millisecond) // network round trip
	var id string
	err := pool.QueryRow(ctx, `INSERT INTO `+schema+`.card_charges (payment, amount, worker) VALUES ($1, $2, $3) RETURNING charge_id`,
		payment, amount, worker).Scan(&id)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{ChargeID: id, Payment: payment, Amount: amount, Worker: worker}, nil
}

// deliveries is worker w's view of the batch: every payment, in an order of
// its own.
func deliveries(n, w int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("payment-%04d", (i*(w+1)+w)%n+1)
	}
	seen := map[string]bool{}
	uniq := out[:0]
	for _, k := range out {
		if !seen[k] {
			seen[k] = true
			uniq = append(uniq, k)
		}
	}
	for i := 1; i <= n; i++ { // fill what the stride skipped
		if k := fmt.Sprintf("payment-%04d", i); !seen[k] {
			uniq = append(uniq, k)
		}
	}
	return uniq
}

// crash runs this program again as a worker that charges key and then dies
// with SIGKILL before Sentinel can record the outcome.
func crash(ctx context.Context, url, key string) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), "PAYMENTS_DEMO_CRASHER="+key, "PAYMENTS_DEMO_URL="+url)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output() // the crasher kills itself; its exit status says so
	if err == nil || !strings.Contains(string(out), "CHARGED") {
		return 0, fmt.Errorf("crasher did not crash as planned: %v, output %q", err, out)
	}
	return cmd.ProcessState.Pid(), nil
}

func crasher() {
	ctx := context.Background()
	key := os.Getenv("PAYMENTS_DEMO_CRASHER")
	pool, err := pgxpool.New(ctx, os.Getenv("PAYMENTS_DEMO_URL"))
	if err != nil {
		log.Fatal(err)
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "payments", DefaultTTL: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	_, err = sentinel.Once(ctx, c, key, func(ctx context.Context) (Receipt, error) {
		if _, err := charge(ctx, pool, key, "worker-crash"); err != nil {
			return Receipt{}, err
		}
		fmt.Println("CHARGED")
		p, _ := os.FindProcess(os.Getpid())
		_ = p.Kill() // SIGKILL: no defer, no cleanup, no completion
		select {}
	})
	log.Fatalf("crasher survived: %v", err)
}
