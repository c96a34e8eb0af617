package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A transactional handler whose own statement failed (a unique violation
// it answers with 409, say) leaves its transaction aborted: nothing can
// commit. The middleware then tried to store the response in that
// transaction, the completion failed with SQLSTATE 25P02, and the client
// got 503 "idempotency store unavailable, retry": every retry ran the
// handler, failed the same way and got the same 503, and the handler's
// 409 never reached anyone. Now an error response (4xx, 5xx) of a handler
// whose transaction is aborted is sent as written, not stored (the key
// is free, as nothing committed); a success response, which nothing backs,
// is answered with ProblemNotCommitted (500), and a repeat runs it again.
func TestTransactionalHandlerWhoseStatementFailed(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	var status atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			tx := idempotency.Tx(r.Context())
			if _, err := tx.Exec(r.Context(), "SELECT 1 / 0"); err == nil {
				t.Error("the statement did not fail")
			}
			w.WriteHeader(int(status.Load()))
			_, _ = w.Write([]byte("handler's body"))
		})

	status.Store(http.StatusConflict)
	for i := 1; i <= 2; i++ {
		r := do(t, srv, "POST", "/users", "taken", "x")
		if r.status != http.StatusConflict || r.body != "handler's body" || r.header.Get(idempotency.HeaderReplayed) != "" {
			t.Fatalf("attempt %d: got %d %q (%s), want the handler's 409 as written", i, r.status, r.problem.Type, r.body)
		}
		if got := runs.Load(); got != int64(i) {
			t.Fatalf("attempt %d: the handler ran %d times: the key was not free", i, got)
		}
	}

	status.Store(http.StatusCreated)
	r := do(t, srv, "POST", "/users", "ignored", "x")
	wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemNotCommitted)
	if r.header.Get("Retry-After") != "" {
		t.Fatalf("Retry-After %q on a handler's failure", r.header.Get("Retry-After"))
	}
	before := runs.Load()
	wantProblem(t, do(t, srv, "POST", "/users", "ignored", "x"), http.StatusInternalServerError, idempotency.ProblemNotCommitted)
	if runs.Load() != before+1 {
		t.Fatal("the repeat did not run the handler again: the key was recorded")
	}
}
