package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// crashEnv tells a re-executed test binary to play the server that dies.
const crashEnv = "IDEMPOTENCY_CRASH_CHILD"

// crashChild serves one request in mode ("tx" or "plain"); its handler
// books a row and then the process is killed (SIGKILL) before responding.
func crashChild() int {
	url, schema, mode := os.Getenv("CRASH_URL"), os.Getenv("CRASH_SCHEMA"), os.Getenv(crashEnv)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, DefaultTTL: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := "INSERT INTO bookings (key) VALUES ('crash')"
		var err error
		if tx := idempotency.Tx(r.Context()); tx != nil {
			_, err = tx.Exec(r.Context(), q)
		} else if mode == "rerun" {
			_, err = cardCharge(r.Context(), pool)
		} else {
			_, err = pool.Exec(r.Context(), q)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // after the write, before the response
		select {}
	})
	o := idempotency.Options{Scope: idempotency.SingleTenant, Transactional: mode == "tx"}
	if mode == "rerun" {
		o.Rerun = 3
	}
	srv := serveRaw(idempotency.Middleware(c, o)(h))
	req, _ := http.NewRequest("POST", srv+"/book", nil)
	req.Header.Set(idempotency.HeaderKey, "crash-1")
	_, _ = http.DefaultClient.Do(req)
	return 3 // not reached: the handler kills the process
}

func runCrashChild(t *testing.T, mode, schema string) {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+mode, "CRASH_URL="+sentineltest.DatabaseURL(t), "CRASH_SCHEMA="+schema)
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v\n%s", err, out)
	}
}

// The server process is killed between the handler's write and its
// response. Transactional: nothing was committed and the key is not
// uncertain; once the dead server's lease expires, the retry books the
// order exactly once.
func TestProcessCrashTransactional(t *testing.T) {
	c, l := newLedger(t)
	runCrashChild(t, "tx", sentineltest.Schema(t))
	if n := bookings(t, c); n != 0 {
		t.Fatalf("%d bookings after the crash, want 0", n)
	}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true}, l.ServeHTTP)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, srv, "POST", "/book", "crash-1", "")
		if r.status == 201 {
			break
		}
		// Until the dead server's claim expires (its 1s TTL), the key is in
		// progress; never uncertain.
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry after the crash: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := bookings(t, c); n != 1 || l.runs.Load() != 1 {
		t.Fatalf("%d bookings, %d runs; want 1 and 1", n, l.runs.Load())
	}
}

// Without Transactional the write survives the crash, so the key must not
// run again: once the lease expires, repeats get the uncertain problem.
func TestProcessCrashPlain(t *testing.T) {
	c, l := newLedger(t)
	runCrashChild(t, "plain", sentineltest.Schema(t))
	if n := bookings(t, c); n != 1 {
		t.Fatalf("%d bookings after the crash, want 1 (the write was not transactional)", n)
	}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, l.ServeHTTP)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, srv, "POST", "/book", "crash-1", "")
		if r.status == 500 && r.problem.Type == idempotency.ProblemUncertain {
			break
		}
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry after the crash: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := bookings(t, c); n != 1 || l.runs.Load() != 0 {
		t.Fatalf("%d bookings, %d runs; want 1 and 0 (never re-run)", n, l.runs.Load())
	}
}

// cardDDL is a card network that deduplicates charges by the reference it
// is given (an idempotency key), counting the requests.
const cardDDL = "CREATE TABLE card_charges (id bigserial, ref text PRIMARY KEY, requests int NOT NULL DEFAULT 1)"

// cardCharge charges the card network with sentinel.EffectKey as the
// reference and returns the charge's id.
func cardCharge(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO card_charges AS c (ref) VALUES ($1)
		ON CONFLICT (ref) DO UPDATE SET requests = c.requests + 1 RETURNING id`, sentinel.EffectKey(ctx)).Scan(&id)
	return id, err
}

// With Options.Rerun, the server process is killed after the handler
// charged the card network (which deduplicates by sentinel.EffectKey) and
// before it answered. Once the dead server's lease expires, a different
// request with the key gets 422 and runs nothing; the client's repeat runs
// the handler again, the network returns the same charge, and the client
// gets 201: one charge, no key left for an operator.
func TestProcessCrashRerun(t *testing.T) {
	c := sentineltest.New(t)
	if _, err := sentineltest.Pool(t).Exec(ctxT(t), cardDDL); err != nil {
		t.Fatal(err)
	}
	runCrashChild(t, "rerun", sentineltest.Schema(t))
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: 3}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		id, err := cardCharge(r.Context(), c.Pool())
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d,"attempt":%d}`, id, sentinel.Attempt(r.Context()))
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ex, err := c.Inspect(ctxT(t), idempotency.ExecutionKey("", "crash-1"))
		if err != nil {
			t.Fatal(err)
		}
		if ex.Rerunnable() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dead server's key never became rerunnable: %+v", ex)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Not the same request: it is not re-run for it.
	if r := do(t, srv, "POST", "/book", "crash-1", "other body"); r.status != 422 {
		t.Fatalf("another request with the key after the crash: %+v", r)
	}
	r := do(t, srv, "POST", "/book", "crash-1", "")
	if r.status != 201 || r.body != `{"charge":1,"attempt":2}` {
		t.Fatalf("repeat after the crash: %d %s", r.status, r.body)
	}
	if r2 := do(t, srv, "POST", "/book", "crash-1", ""); r2.status != 201 || r2.body != r.body || r2.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("second repeat: %+v", r2)
	}
	var charges, requests int
	if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*), sum(requests) FROM card_charges").Scan(&charges, &requests); err != nil {
		t.Fatal(err)
	}
	if charges != 1 || requests != 2 || runs.Load() != 1 {
		t.Fatalf("%d charges from %d requests, %d runs here; want 1, 2, 1", charges, requests, runs.Load())
	}
	if u, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true}); err != nil || len(u) != 0 {
		t.Fatalf("uncertain keys %v (%v), want none", u, err)
	}
}
