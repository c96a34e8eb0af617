// Command queue is Sentinel's fair-queue demo: a shop with one printer and
// customers in separate processes. Each customer draws a ticket (Turn), waits
// for its number on the wall indicator (the lowest live ticket), prints, and
// hands over. One customer faints at the counter (SIGKILL while holding its
// turn): the queue moves on when its ticket expires, within the TTL, instead
// of stalling. Every print is a write guarded by the ticket (VerifyTurn in
// the same transaction), and the demo follows the queue the way turn's
// `follow` does:
//
//	printer: 5 assigned to "customer 2, job 1"
//	printer: 5 granted
//	printer: 5 completed by "customer 2, job 1"
//
// At the end it checks the printed log: tickets served in increasing order,
// no two prints overlapping.
//
//	go run ./examples/queue
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
	"io"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

const (
	schema   = "sentinel_queue_demo"
	resource = "printer"
	ttl      = time.Second
)

func main() {
	customers := flag.Int("customers", 3, "customer processes")
	jobs := flag.Int("jobs", 3, "print jobs per customer")
	flag.Parse()
	log.SetFlags(0)
	if id := os.Getenv("QUEUE_DEMO_CUSTOMER"); id != "" {
		if err := customer(id); err != nil {
			log.Fatalf("customer %s: %v", id, err)
		}
		return
	}
	if err := run(os.Stdout, *customers, *jobs); err != nil {
		log.Fatalf("queue demo: %v", err)
	}
}

// faintJob is the job of customer 2 at which it faints.
const faintJob = 2

// customer is one process: it prints its jobs one turn at a time. The
// customer whose QUEUE_DEMO_FAINT names a job is killed while holding that
// turn.
func customer(id string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("QUEUE_DEMO_DB"))
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema, DefaultTTL: ttl, Host: "customer-" + id})
	if err != nil {
		return err
	}
	defer client.Close()
	jobs, _ := strconv.Atoi(os.Getenv("QUEUE_DEMO_JOBS"))
	faint := os.Getenv("QUEUE_DEMO_FAINT")
	for j := 1; j <= jobs; j++ {
		label := fmt.Sprintf("customer %s, job %d", id, j)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		turn, err := client.Turn(wctx, resource, sentinel.WithLabel(label))
		cancel()
		if err != nil {
			return err
		}
		if faint == strconv.Itoa(j) {
			// Faint at the counter: no release, no more heartbeats.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		if err := printJob(ctx, client, turn); err != nil {
			_ = turn.Release(ctx)
			return err
		}
		if err := turn.Release(ctx); err != nil {
			return err
		}
	}
	return nil
}

// printJob writes one job to the shared log, guarded by the ticket: the write
// commits only while the ticket is the served one, and nobody behind can be
// served before it commits.
func printJob(ctx context.Context, client *sentinel.Client, turn *sentinel.Turn) error {
	work, stop := turn.Context(ctx)
	defer stop()
	tx, err := client.Pool().Begin(work)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := client.VerifyTurn(work, tx, resource, turn.Ticket()); err != nil {
		return err
	}
	if _, err := tx.Exec(work, `INSERT INTO `+pgx.Identifier{schema, "printed"}.Sanitize()+
		` (ticket, label, started_at) VALUES ($1, $2, clock_timestamp())`, turn.Ticket(), turn.Label()); err != nil {
		return err
	}
	time.Sleep(30 * time.Millisecond) // the printer at work
	if _, err := tx.Exec(work, `UPDATE `+pgx.Identifier{schema, "printed"}.Sanitize()+
		` SET finished_at = clock_timestamp() WHERE ticket = $1`, turn.Ticket()); err != nil {
		return err
	}
	return tx.Commit(work)
}

// lockedWriter serializes writes from the follower and the customers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func run(w io.Writer, customers, jobs int) error {
	ctx := context.Background()
	out := &lockedWriter{w: w}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		u, cleanup, err := testdb.DemoURL(ctx, func(string, ...any) {})
		if err != nil {
			return fmt.Errorf("no $DATABASE_URL and no local PostgreSQL: %w", err)
		}
		defer cleanup()
		url = u
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return err
	}
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema, DefaultTTL: ttl})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+pgx.Identifier{schema, "printed"}.Sanitize()+
		` (ticket bigint PRIMARY KEY, label text NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz)`); err != nil {
		return err
	}

	// The wall indicator: follow the queue and print its progression.
	fctx, stopFollow := context.WithCancel(ctx)
	defer stopFollow()
	var events sync.WaitGroup
	events.Add(1)
	var crashed int
	go func() {
		defer events.Done()
		_ = client.FollowQueues(fctx, []string{resource}, func(e sentinel.QueueEvent) error {
			fmt.Fprintln(out, e)
			if e.Type == sentinel.QueueCrashed {
				crashed++
			}
			return nil
		}, sentinel.WithAfterEvent(0)) // the schema is new: from its first event, however late this starts
	}()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make(chan error, customers)
	for i := 1; i <= customers; i++ {
		cmd := exec.Command(self)
		faint := ""
		if i == 2 {
			faint = strconv.Itoa(faintJob) // customer 2 faints during its second job
		}
		cmd.Env = append(os.Environ(), "QUEUE_DEMO_CUSTOMER="+strconv.Itoa(i), "QUEUE_DEMO_DB="+url,
			"QUEUE_DEMO_JOBS="+strconv.Itoa(jobs), "QUEUE_DEMO_FAINT="+faint)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cmd.Wait()
			var exit *exec.ExitError
			if errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signaled() && faint != "" {
				fmt.Fprintf(out, "(customer %d fainted at the counter: killed while holding its turn)\n", i)
				return
			}
			if err != nil {
				errs <- fmt.Errorf("customer %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	// Closing time: the shopkeeper takes the last turn. A customer who
	// fainted holding the last ticket is skipped only once someone is
	// behind it; this turn is served after that ticket's TTL and records
	// it as crashed.
	closing, err := client.Turn(ctx, resource, sentinel.WithLabel("shopkeeper, closing up"))
	if err != nil {
		return err
	}
	if err := closing.Release(ctx); err != nil {
		return err
	}
	time.Sleep(2 * client.Config().WaitRecheck) // let the follower catch up
	stopFollow()
	events.Wait()

	// The printed log: served in ticket order, never two at once.
	rows, err := pool.Query(ctx, `SELECT ticket, label, started_at, finished_at FROM `+
		pgx.Identifier{schema, "printed"}.Sanitize()+` ORDER BY started_at`)
	if err != nil {
		return err
	}
	type print struct {
		ticket          int64
		label           string
		started, finish time.Time
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (print, error) {
		var p print
		var fin *time.Time
		err := r.Scan(&p.ticket, &p.label, &p.started, &fin)
		if fin != nil {
			p.finish = *fin
		}
		return p, err
	})
	if err != nil {
		return err
	}
	// Customer 2 never printed the job it fainted at, nor its later ones.
	want := customers*jobs - max(0, jobs-faintJob+1)
	if len(ps) != want {
		return fmt.Errorf("%d prints, want %d", len(ps), want)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].ticket <= ps[i-1].ticket {
			return fmt.Errorf("ticket %d printed after %d: out of order", ps[i].ticket, ps[i-1].ticket)
		}
		if ps[i].started.Before(ps[i-1].finish) {
			return fmt.Errorf("prints %d and %d overlap", ps[i-1].ticket, ps[i].ticket)
		}
	}
	if crashed != 1 {
		return fmt.Errorf("%d crashed events, want 1", crashed)
	}
	fmt.Fprintf(out, "%d jobs printed in ticket order, none overlapping; the fainted customer's turn was skipped after its TTL (%s)\n", len(ps), ttl)
	return nil
}
