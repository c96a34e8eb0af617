// Command river shows Sentinel inside a River job: River
// (github.com/riverqueue/river) delivers each job at least once, Sentinel
// makes its charge happen at most once.
//
// A batch of charge jobs is queued. Worker A, a process of its own, works
// them and is killed with SIGKILL in the middle of one charge, after the
// card network charged it. River's rescuer finds that job stuck and
// redelivers it to worker B (attempt 2): Sentinel knows the first attempt
// crossed into its side effect without an outcome, refuses to charge again,
// and the worker cancels the job for an operator (river.JobCancel). The
// operator checks the card network, records the charge it finds
// (ForceComplete) and retries the job in River: attempt 3 gets the stored
// receipt without charging. A job worker A finished but River had not yet
// recorded as completed when A died is redelivered too, and replayed.
// Every payment is charged exactly once.
//
//	cd examples/river && go run .
//
// It uses $DATABASE_URL when set, otherwise a throwaway PostgreSQL
// started for the run (from local server binaries, else in a Docker
// container).
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

const (
	sentinelSchema = "sentinel_river_demo" // Sentinel's tables and the card network's
	riverSchema    = "river_demo"          // River's tables
	namespace      = "payments"

	workerEnv = "RIVER_DEMO_WORKER_A" // set: this process is worker A, to be killed on this payment
	urlEnv    = "RIVER_DEMO_URL"

	// River rescues a job that has been running longer than this (its
	// default is an hour); it must be at least the job timeout.
	rescueAfter = 3 * time.Second
)

// ChargeArgs is the job: charge one payment.
type ChargeArgs struct {
	Payment string `json:"payment"`
	Amount  int    `json:"amount_cents"`
}

// Kind is the job's kind in River.
func (ChargeArgs) Kind() string { return "charge" }

// Receipt is what a charge returns, and what Sentinel stores and replays.
type Receipt struct {
	ChargeID string `json:"charge_id"`
	Payment  string `json:"payment"`
	Amount   int    `json:"amount_cents"`
	Worker   string `json:"worker"`
}

// ChargeWorker charges a payment inside sentinel.Once, keyed by the
// payment: whatever River redelivers, the card network is called at most
// once per payment.
type ChargeWorker struct {
	river.WorkerDefaults[ChargeArgs]
	Sentinel *sentinel.Client
	Pool     *pgxpool.Pool // the card network (simulated by a table)
	Name     string
	// AfterCharge, when set, runs after the card network charged and
	// before fn returns (worker A hangs there to be killed).
	AfterCharge func(job *river.Job[ChargeArgs])
	// Log, when set, is told each attempt's outcome.
	Log func(job *river.Job[ChargeArgs], res sentinel.Result[Receipt], err error)
}

// Work runs one delivery of a charge job.
func (w *ChargeWorker) Work(ctx context.Context, job *river.Job[ChargeArgs]) error {
	res, err := sentinel.Once(ctx, w.Sentinel, job.Args.Payment, func(ctx context.Context) (Receipt, error) {
		r, err := charge(ctx, w.Pool, job.Args, w.Name)
		if err == nil && w.AfterCharge != nil {
			w.AfterCharge(job)
		}
		return r, err
	}, sentinel.WithTTL(time.Second), sentinel.WithHardTTL(time.Minute), sentinel.WithWait())
	if w.Log != nil {
		w.Log(job, res, err)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sentinel.ErrUncertain):
		// An earlier delivery crossed into the charge and stopped without
		// an outcome: retrying cannot tell whether the card was charged.
		// Stop retrying; an operator decides (see main).
		return river.JobCancel(err)
	default:
		return err // nothing was charged: River retries with backoff
	}
}

func main() {
	log.SetFlags(0)
	if key := os.Getenv(workerEnv); key != "" {
		workerA(key) // before flag parsing: it is started with the test binary's flag too
		return
	}
	payments := flag.Int("payments", 6, "charge jobs in the batch")
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *payments); err != nil {
		log.Fatalf("river demo: %v", err)
	}
}

// summary is what a run established, for the test.
type summary struct {
	payments, charges, twice int
	crashed                  string
	attempts                 int    // River's attempts of the crashed payment's job
	states                   string // River's job states, counted
}

func run(ctx context.Context, out io.Writer, nPayments int) (*summary, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	where := "$DATABASE_URL"
	if os.Getenv("DATABASE_URL") == "" {
		where = "a throwaway PostgreSQL started for this run"
	}
	say("Sentinel + River demo: %d charge jobs; River delivers each at least once, Sentinel charges each at most once\n", nPayments)
	say("database: %s\n\n", where)
	url, cleanup, err := testdb.DemoURL(ctx, func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	defer cleanup()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := setup(ctx, pool); err != nil {
		return nil, err
	}

	// The batch.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: riverSchema, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	var params []river.InsertManyParams
	for i := 1; i <= nPayments; i++ {
		params = append(params, river.InsertManyParams{Args: ChargeArgs{Payment: fmt.Sprintf("payment-%04d", i), Amount: 1000 + 37*i}})
	}
	if _, err := inserter.InsertMany(ctx, params); err != nil {
		return nil, err
	}
	crashed := fmt.Sprintf("payment-%04d", min(3, nPayments))

	// 1. Worker A works the batch and is killed in the middle of a charge.
	pid, err := killWorkerA(ctx, url, crashed, say)
	if err != nil {
		return nil, err
	}
	say("worker A (pid %d) was killed with SIGKILL in the middle of %s's charge\n", pid, crashed)
	say("River rescues a job running for longer than RescueStuckJobsAfter (%s here, an hour by default): waiting for it\n\n", rescueAfter)
	time.Sleep(rescueAfter)

	// 2. Worker B: River redelivers the stuck job.
	sc, err := sentinel.New(pool, &sentinel.Config{Schema: sentinelSchema, Namespace: namespace, Owner: "worker-B"})
	if err != nil {
		return nil, err
	}
	defer sc.Close()
	var mu sync.Mutex
	cw := &ChargeWorker{Sentinel: sc, Pool: pool, Name: "worker-B",
		Log: func(job *river.Job[ChargeArgs], res sentinel.Result[Receipt], err error) {
			mu.Lock()
			defer mu.Unlock()
			say("worker B  %s  attempt %d: %s\n", job.Args.Payment, job.Attempt, outcome(res, err))
		}}
	workers := river.NewWorkers()
	river.AddWorker(workers, cw)
	rc, err := river.NewClient(riverpgxv5.New(pool), workerConfig(workers, 2))
	if err != nil {
		return nil, err
	}
	if err := rc.Start(ctx); err != nil {
		return nil, err
	}
	defer func() { _ = rc.Stop(context.WithoutCancel(ctx)) }()
	if err := waitFinal(ctx, pool, nPayments); err != nil {
		return nil, err
	}

	// 3. The operator: the job was cancelled as uncertain. The card
	//    network says whether the charge happened.
	var jobID int64
	if err := pool.QueryRow(ctx, `SELECT id FROM `+riverSchema+`.river_job WHERE state = 'cancelled' AND args->>'payment' = $1`, crashed).Scan(&jobID); err != nil {
		return nil, fmt.Errorf("the crashed payment's job was not cancelled as uncertain: %w", err)
	}
	ex, err := sc.Reconcile(ctx, crashed, sentinel.WithMetadata(map[string]any{"reason": "worker A killed mid-charge; River job " + fmt.Sprint(jobID)}))
	if err != nil {
		return nil, err
	}
	var r Receipt
	err = pool.QueryRow(ctx, `SELECT charge_id, payment, amount, worker FROM `+sentinelSchema+`.card_charges WHERE payment = $1`, crashed).
		Scan(&r.ChargeID, &r.Payment, &r.Amount, &r.Worker)
	switch {
	case err == nil:
		say("\noperator: River job %d (%s) was cancelled as uncertain; the card network has %s -> ForceComplete, then River's JobRetry\n", jobID, crashed, r.ChargeID)
		err = sc.ForceComplete(ctx, crashed, r, sentinel.WithToken(ex.Token))
	case errors.Is(err, pgx.ErrNoRows):
		say("\noperator: River job %d (%s) was cancelled as uncertain; no charge at the card network -> ResetToClaimed, then River's JobRetry\n", jobID, crashed)
		err = sc.ResetToClaimed(ctx, crashed, sentinel.WithToken(ex.Token))
	}
	if err != nil {
		return nil, err
	}
	if _, err := rc.JobRetry(ctx, jobID); err != nil {
		return nil, err
	}
	if err := waitFinal(ctx, pool, nPayments); err != nil {
		return nil, err
	}

	// 4. What the card network and River say.
	s := &summary{payments: nPayments, crashed: crashed}
	if err := pool.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT payment) FROM `+sentinelSchema+`.card_charges`).Scan(&s.charges, &s.twice); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT attempt FROM `+riverSchema+`.river_job WHERE id = $1`, jobID).Scan(&s.attempts); err != nil {
		return nil, err
	}
	if err := pool.QueryRow(ctx, `SELECT string_agg(state || ' ' || n, ', ' ORDER BY state) FROM
		(SELECT state::text, count(*) AS n FROM `+riverSchema+`.river_job GROUP BY state) s`).Scan(&s.states); err != nil {
		return nil, err
	}
	verdict := "OK: every payment charged exactly once"
	if s.charges != nPayments || s.twice != 0 {
		verdict = "FAILED: charges do not match payments"
	}
	say("\nRiver: jobs %s; %s's job took %d attempts (killed, redelivered, retried by the operator)\n", s.states, crashed, s.attempts)
	say("card network: %d payments, %d charges, %d charged twice -> %s\n", nPayments, s.charges, s.twice, verdict)
	if s.charges != nPayments || s.twice != 0 {
		return s, errors.New(verdict)
	}
	return s, nil
}

// outcome describes one attempt for the log.
func outcome(res sentinel.Result[Receipt], err error) string {
	switch {
	case err == nil && res.Cached:
		return fmt.Sprintf("Sentinel replayed the stored receipt %s, not charged again -> done", res.Value.ChargeID)
	case err == nil:
		return fmt.Sprintf("charged %s -> done", res.Value.ChargeID)
	case errors.Is(err, sentinel.ErrUncertain):
		return "Sentinel: an earlier attempt was cut off mid-charge (uncertain), not charged again -> JobCancel, for an operator"
	default:
		return fmt.Sprintf("error %v -> River retries", err)
	}
}

// workerConfig is River's configuration for a worker of the demo.
func workerConfig(workers *river.Workers, maxWorkers int) *river.Config {
	return &river.Config{
		Schema:               riverSchema,
		Logger:               quiet(),
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:              workers,
		JobTimeout:           rescueAfter,
		RescueStuckJobsAfter: rescueAfter,
		FetchPollInterval:    100 * time.Millisecond,
	}
}

// quiet keeps River's informational logs out of the demo's output.
func quiet() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// waitFinal waits until every job is completed or cancelled.
func waitFinal(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+riverSchema+`.river_job WHERE state IN ('completed', 'cancelled')`).Scan(&done); err != nil {
			return err
		}
		if done == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d jobs finished: %w", done, n, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setup creates fresh demo schemas: Sentinel's, the card network's table,
// and River's.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	for _, s := range []string{sentinelSchema, riverSchema} {
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+s+" CASCADE"); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+riverSchema); err != nil {
		return err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: riverSchema, Logger: quiet()})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: sentinelSchema})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE `+sentinelSchema+`.card_charges (
		charge_id text PRIMARY KEY DEFAULT 'ch_' || substr(md5(random()::text), 1, 12),
		payment text NOT NULL, amount int NOT NULL, worker text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	return err
}

// charge is the side effect: a call to the "card network" (its own
// autocommit statement, outside Sentinel's control, like an HTTP call).
func charge(ctx context.Context, pool *pgxpool.Pool, args ChargeArgs, worker string) (Receipt, error) {
	var id string
	err := pool.QueryRow(ctx, `INSERT INTO `+sentinelSchema+`.card_charges (payment, amount, worker) VALUES ($1, $2, $3) RETURNING charge_id`,
		args.Payment, args.Amount, worker).Scan(&id)
	if err != nil {
		return Receipt{}, err
	}
	return Receipt{ChargeID: id, Payment: args.Payment, Amount: args.Amount, Worker: worker}, nil
}

// killWorkerA runs this program again as worker A, which works the batch
// until it is in the middle of key's charge, and kills it there.
func killWorkerA(ctx context.Context, url, key string, say func(string, ...any)) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, self, "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+key, urlEnv+"="+url)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "CHARGING ") {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		}
		say("%s\n", line)
	}
	return 0, fmt.Errorf("worker A exited before charging %s", key)
}

// workerA works the batch with River and hangs in the middle of key's
// charge (after the card network charged it) until it is killed.
func workerA(key string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(urlEnv))
	if err != nil {
		log.Fatal(err)
	}
	sc, err := sentinel.New(pool, &sentinel.Config{Schema: sentinelSchema, Namespace: namespace, Owner: "worker-A"})
	if err != nil {
		log.Fatal(err)
	}
	cw := &ChargeWorker{Sentinel: sc, Pool: pool, Name: "worker-A",
		AfterCharge: func(job *river.Job[ChargeArgs]) {
			if job.Args.Payment == key {
				fmt.Printf("CHARGING %s\n", key)
				for {
					time.Sleep(time.Hour) // until SIGKILL
				}
			}
		},
		Log: func(job *river.Job[ChargeArgs], res sentinel.Result[Receipt], err error) {
			fmt.Printf("worker A  %s  attempt %d: %s\n", job.Args.Payment, job.Attempt, outcome(res, err))
		}}
	workers := river.NewWorkers()
	river.AddWorker(workers, cw)
	cfg := workerConfig(workers, 1)
	// Worker A takes no part in River's leader election, so that worker B
	// need not wait for a dead leader's term to expire before River's
	// rescuer runs.
	cfg.LeaderElectionDisabled = true
	rc, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := rc.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select {}
}
