package idempotency_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A transactional handler whose write breaks a deferred constraint (a
// UNIQUE ... DEFERRABLE INITIALLY DEFERRED, or a deferred constraint
// trigger) fails at the commit, not at its statement: the transaction
// is not aborted when the handler answers, so the middleware stores the
// response and commits, and the commit fails with SQLSTATE 23505. The
// client got 503 "idempotency store unavailable, retry" with Retry-After,
// and every retry ran the handler, failed the same way and got the same
// 503: the handler's failure, reported as an outage forever. It is now
// answered as a statement failure of the handler is: a success status
// gets 500 ProblemNotCommitted without Retry-After, an error status is
// sent as written, not stored; nothing is committed and the key is free.
func TestTransactionalHandlerWhoseCommitFailed(t *testing.T) {
	c := sentineltest.New(t)
	if _, err := sentineltest.Pool(t).Exec(ctxT(t), `CREATE TABLE seats (
		id bigserial PRIMARY KEY,
		holder text NOT NULL,
		CONSTRAINT one_seat_each UNIQUE (holder) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	if _, err := sentineltest.Pool(t).Exec(ctxT(t), "INSERT INTO seats (holder) VALUES ('alice')"); err != nil {
		t.Fatal(err)
	}
	var runs, status atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			var id int64
			if err := idempotency.Tx(r.Context()).QueryRow(r.Context(), "INSERT INTO seats (holder) VALUES ('alice') RETURNING id").Scan(&id); err != nil {
				t.Errorf("the deferred constraint failed the statement: %v", err)
			}
			w.WriteHeader(int(status.Load()))
			fmt.Fprintf(w, "seat %d", id)
		})

	status.Store(http.StatusCreated)
	for i := 1; i <= 2; i++ {
		r := do(t, srv, "POST", "/seats", "alice-again", "x")
		wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemNotCommitted)
		if r.header.Get("Retry-After") != "" {
			t.Fatalf("attempt %d: Retry-After %q on the handler's failure", i, r.header.Get("Retry-After"))
		}
		if got := runs.Load(); got != int64(i) {
			t.Fatalf("attempt %d: the handler ran %d times: the key was not free", i, got)
		}
	}

	// An error status the handler wrote (and Store keeps): sent as
	// written, not stored.
	status.Store(http.StatusPaymentRequired)
	r := do(t, srv, "POST", "/seats", "alice-402", "x")
	if r.status != http.StatusPaymentRequired || r.header.Get(idempotency.HeaderReplayed) != "" || r.header.Get("Retry-After") != "" {
		t.Fatalf("got %d %q %v, want the handler's 402 as written", r.status, r.body, r.header)
	}
	before := runs.Load()
	if r := do(t, srv, "POST", "/seats", "alice-402", "x"); r.status != http.StatusPaymentRequired || runs.Load() != before+1 {
		t.Fatalf("repeat: %d, runs %d -> %d: want the handler run again", r.status, before, runs.Load())
	}
	var n int
	if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM seats").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d seats (%v), want 1: something committed", n, err)
	}
}

// An outage stays an outage: a transactional handler whose connection
// is cut (its backend terminated, as by a failover or an administrator)
// gets 503 ProblemUnavailable with Retry-After, whatever it answered,
// and the retry runs it again once the store is back.
func TestTransactionalHandlerWhoseConnectionWasCut(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				// Only this request's own connection: the server goes on.
				_, err := idempotency.Tx(r.Context()).Exec(r.Context(), "SELECT pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid())")
				if err == nil {
					t.Error("the statement that cut its connection succeeded")
				}
			}
			w.WriteHeader(http.StatusCreated)
		})
	r := do(t, srv, "POST", "/seats", "cut", "x")
	wantProblem(t, r, http.StatusServiceUnavailable, idempotency.ProblemUnavailable)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After on an outage")
	}
	if r := do(t, srv, "POST", "/seats", "cut", "x"); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry: %d after %d runs, want 201 from a second run", r.status, runs.Load())
	}
}
