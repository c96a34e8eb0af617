package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
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
	srv := serveRaw(idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: mode == "tx"})(h))
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
