package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// With Options.Rerun and Options.Wait, a repeat that waits for the first
// attempt is woken when that attempt stops, and asks the rerun guard,
// which reads the key's last run, before it re-runs the key. When
// Options.Wait ran out during that read, the read was cancelled and the
// repeat got 503 ProblemUnavailable ("the server's idempotency store
// failed"), logged at Error as a request that could not be recorded: an
// outage for the operators, where the store was fine and the wait was
// over. It gets what a wait that ran out gets, 409 with Retry-After, and
// nothing is logged as a failure of the store; its retry re-runs the key.
func TestRerunGuardReadCutByTheWaitIsNotAStoreFailure(t *testing.T) {
	admin := sentineltest.Pool(t)
	schema := sentineltest.Schema(t)
	var (
		mu      sync.Mutex
		lockTx  pgx.Tx
		errLogs []string
	)
	// Once the first attempt stopped (sentinel logs so before Once
	// returns), the key's history is locked: the guard's read of it waits.
	hook := func(level slog.Level, msg string) {
		mu.Lock()
		defer mu.Unlock()
		if level >= slog.LevelError {
			errLogs = append(errLogs, msg)
		}
		if !strings.Contains(msg, "attempt stopped without an outcome") || lockTx != nil {
			return
		}
		tx, err := admin.Begin(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(context.Background(), "LOCK TABLE "+pgx.Identifier{schema, "events"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Error(err)
			_ = tx.Rollback(context.Background())
			return
		}
		lockTx = tx
	}
	unlock := func() {
		mu.Lock()
		defer mu.Unlock()
		if lockTx != nil {
			_ = lockTx.Rollback(context.Background())
			lockTx = nil
		}
	}
	defer unlock()
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Logger: slog.New(levelLog{hook})}))
	type scenario struct {
		started, release chan struct{}
		runs             atomic.Int64
	}
	var cur atomic.Pointer[scenario]
	const wait = 2 * time.Second
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: 3, Wait: wait}, func(w http.ResponseWriter, r *http.Request) {
		s := cur.Load()
		if s.runs.Add(1) == 1 {
			close(s.started)
			<-s.release
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	// The waiter, woken as the lock is taken, may read the key's history
	// first: then its guard is not cut short, and the scenario is tried
	// again with another key.
	for try := 0; try < 5; try++ {
		key := fmt.Sprintf("pay-%d", try)
		s := &scenario{started: make(chan struct{}), release: make(chan struct{})}
		cur.Store(s)
		first, waiter := make(chan reply, 1), make(chan reply, 1)
		go func() { first <- do(t, srv, "POST", "/charges", key, `{"amount":500}`) }()
		<-s.started
		go func() { waiter <- do(t, srv, "POST", "/charges", key, `{"amount":500}`) }()
		for deadline := time.Now().Add(30 * time.Second); ; {
			var n int
			if err := admin.QueryRow(ctxT(t), "SELECT waiters FROM "+pgx.Identifier{schema, "executions"}.Sanitize()+" WHERE key = $1",
				idempotency.ExecutionKey("", key)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the repeat never waited")
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(s.release)
		// A re-run claimed before the lock waits for it to write its history.
		timer := time.AfterFunc(wait+2*time.Second, unlock)
		w := <-waiter
		timer.Stop()
		unlock()
		if r := <-first; r.status != http.StatusServiceUnavailable || r.problem.Type != idempotency.ProblemRerun {
			t.Fatalf("the request whose handler called Uncertain: %+v", r)
		}
		if w.status == http.StatusCreated {
			t.Logf("try %d: the waiter read the key before the lock and re-ran it", try)
			continue
		}
		wantProblem(t, w, http.StatusConflict, idempotency.ProblemInProgress)
		if w.header.Get("Retry-After") == "" {
			t.Errorf("no Retry-After: %+v", w)
		}
		mu.Lock()
		logged := errLogs
		mu.Unlock()
		for _, m := range logged {
			if strings.Contains(m, "could not be recorded") {
				t.Errorf("logged at Error: %q", m)
			}
		}
		if r := do(t, srv, "POST", "/charges", key, `{"amount":500}`); r.status != http.StatusCreated || s.runs.Load() != 2 {
			t.Fatalf("the retry got %d after %d runs (%s), want 201 from a re-run", r.status, s.runs.Load(), r.body)
		}
		return
	}
	t.Fatal("the wait never ran out in the guard's read: the test did not reproduce it")
}

// levelLog is a slog handler that calls fn with each record's level and
// message, then discards the record.
type levelLog struct{ fn func(slog.Level, string) }

func (h levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (h levelLog) Handle(_ context.Context, r slog.Record) error {
	h.fn(r.Level, r.Message)
	return nil
}
func (h levelLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h levelLog) WithGroup(string) slog.Handler      { return h }
