package idempotency_test

import (
	"context"
	"errors"
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

// onLog is a slog handler that calls fn with each record's message (once
// fn returns), then discards the record.
type onLog struct{ fn func(msg string) }

func (h onLog) Enabled(context.Context, slog.Level) bool      { return true }
func (h onLog) Handle(_ context.Context, r slog.Record) error { h.fn(r.Message); return nil }
func (h onLog) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h onLog) WithGroup(string) slog.Handler                 { return h }

// With Options.Rerun, a request whose own attempt stopped without an
// outcome (its handler called Uncertain, or its lease was lost, as when
// the database fails over under it) is re-run by its repeat: the
// middleware reads the key to say so (ProblemRerun, 503 with Retry-After).
// When that read failed (a statement cancelled, 57014; a connection cut
// as the database failed over), the request got 500 ProblemUncertain
// without Retry-After, "it will not be run again: an operator resolves
// it", although the key waits for the repeat and no operator is needed:
// a passing failure of the store answered as a permanent one. The key's
// state is known from the call's own error: the repeat runs it again.
func TestRerunPendingWhoseReadFailedIsNotSentToAnOperator(t *testing.T) {
	admin := sentineltest.Pool(t)
	schema := sentineltest.Schema(t)
	var (
		mu     sync.Mutex
		lockTx pgx.Tx
		armed  atomic.Bool
	)
	// Once the attempt stopped (sentinel logs so before Once returns),
	// every read of the key's row waits for a lock, and is cancelled
	// (pg_cancel_backend: SQLSTATE 57014) while the lock is held.
	lockKeys := func(msg string) {
		if !armed.Load() || !strings.Contains(msg, "attempt stopped without an outcome") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if lockTx != nil {
			return
		}
		tx, err := admin.Begin(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := tx.Exec(context.Background(), "LOCK TABLE "+pgx.Identifier{schema, "executions"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			t.Error(err)
			_ = tx.Rollback(context.Background())
			return
		}
		lockTx = tx
	}
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Logger: slog.New(onLog{lockKeys})}))
	stop, stopped := make(chan struct{}), make(chan struct{})
	cancelled := make(chan struct{}, 1)
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int
			if err := admin.QueryRow(context.Background(), `SELECT count(pg_catalog.pg_cancel_backend(pid)) FROM pg_catalog.pg_stat_activity
				WHERE pid <> pg_catalog.pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE '%executions%' AND query LIKE $1`,
				"%"+schema+"%").Scan(&n); err == nil && n > 0 {
				select {
				case cancelled <- struct{}{}:
				default:
				}
			}
		}
	}()
	// Joined, not only told to stop: a read of its in flight as the test
	// ends holds a connection of the test's pool.
	defer func() { close(stop); <-stopped }()

	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: 3}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			armed.Store(true)
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	first := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`)
	armed.Store(false)
	mu.Lock()
	if lockTx != nil {
		_ = lockTx.Rollback(context.Background())
	}
	locked := lockTx != nil
	mu.Unlock()
	if !locked {
		t.Fatal("the key's row was never locked: the attempt did not stop as expected")
	}
	// The canceller says so once its statement returns, which may be
	// after the request's 503 did (the cancelled read answers at once).
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatalf("no read of the key was cancelled (got %d %s): the test did not reproduce the failure", first.status, first.body)
	}
	t.Logf("%d %s", first.status, first.body)
	if first.status == http.StatusInternalServerError || first.status < 500 {
		t.Errorf("a read that failed for a moment got %d %q: a client is told its request failed for good", first.status, first.problem.Type)
	}
	if first.header.Get("Retry-After") == "" {
		t.Errorf("%d %q without Retry-After", first.status, first.problem.Type)
	}
	if strings.Contains(first.body, "operator") {
		t.Errorf("sent to an operator, though the repeat runs the request again: %s", first.body)
	}
	if execs, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true}); err != nil || len(execs) != 0 {
		t.Fatalf("uncertain keys left for an operator: %+v %v", execs, err)
	}
	if r := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("the repeat got %d after %d runs (%s), want 201 from a re-run", r.status, runs.Load(), r.body)
	}
}
