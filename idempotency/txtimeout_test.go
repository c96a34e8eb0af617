package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A transactional handler that bounds its own statements with SET LOCAL
// statement_timeout or lock_timeout in Tx bound the middleware's
// completion statement and commit too, which run in the same transaction:
// when another session held the key's row a moment (a heartbeat's
// renewal, an operator's read), the completion failed with 57014 or 55P03,
// the store's failure: 503 ProblemUnavailable, nothing committed, and a
// retry ran the handler again into the same timeout. The middleware now
// sets them back to the connection's before its own statements: the
// completion waits for the row as it does without the handler's SET, and
// the response is stored.
func TestTransactionalHandlersTimeoutsDoNotBindTheCompletion(t *testing.T) {
	for _, set := range []string{"SET LOCAL statement_timeout = '100ms'", "SET LOCAL lock_timeout = '1ms'"} {
		t.Run(set, func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			released := make(chan struct{})
			srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
				func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					if _, err := idempotency.Tx(r.Context()).Exec(r.Context(), set); err != nil {
						t.Error(err)
					}
					// Another session holds the key's row a moment (as a
					// heartbeat's renewal or an operator's read may):
					// the completion waits for it.
					locked := make(chan struct{})
					go func() {
						defer close(released)
						tx, err := c.Pool().Begin(context.Background())
						if err != nil {
							t.Error(err)
							close(locked)
							return
						}
						defer func() { _ = tx.Rollback(context.Background()) }()
						if _, err := tx.Exec(context.Background(), "SELECT 1 FROM executions WHERE key = $1 FOR UPDATE", idempotency.ExecutionKey("", "k")); err != nil {
							t.Error(err)
						}
						close(locked)
						time.Sleep(500 * time.Millisecond)
					}()
					<-locked
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write([]byte("done"))
				})
			r := do(t, srv, "POST", "/reports", "k", "x")
			<-released
			if r.status != http.StatusCreated || r.body != "done" {
				t.Fatalf("got %d %q (%s), want the handler's 201: the handler's %q bound the middleware's completion", r.status, r.problem.Type, r.body, set)
			}
			if r := do(t, srv, "POST", "/reports", "k", "x"); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 1 {
				t.Fatalf("repeat: %d %q, %d runs, want the stored 201 replayed", r.status, r.problem.Type, runs.Load())
			}
		})
	}
}
