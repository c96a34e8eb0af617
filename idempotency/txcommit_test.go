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

// Which errors at the commit are the handler's and which the store's was
// decided by an allow-list (SQLSTATE classes 22, 23, P0): a deferred
// constraint trigger raising any other code (a user-defined S0001, a
// 0A000 or 42501 from its body) was answered 503 ProblemUnavailable,
// "the store is unavailable, retry", and every retry failed the same way.
// Now only the store's classes are the store's: connection (08),
// transaction rollback (40: serialization failure, deadlock), resources
// (53), operator intervention (57), system and internal errors (58, XX);
// every other code is the handler's.
func TestTransactionalCommitErrorClasses(t *testing.T) {
	c := sentineltest.New(t)
	if _, err := sentineltest.Pool(t).Exec(ctxT(t), `CREATE TABLE refusals (code text NOT NULL);
		CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused at commit' USING ERRCODE = NEW.code; END $$;
		CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON refusals DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW EXECUTE FUNCTION refuse()`); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			code := r.URL.Query().Get("code")
			if _, err := idempotency.Tx(r.Context()).Exec(r.Context(), "INSERT INTO refusals (code) VALUES ($1)", code); err != nil {
				t.Errorf("the deferred trigger failed the statement: %v", err)
			}
			w.WriteHeader(http.StatusCreated)
		})
	for _, tc := range []struct {
		code  string
		store bool // the store's: 503, retry
	}{
		{"S0001", false}, {"0A000", false}, {"42501", false}, {"P0001", false}, {"23505", false},
		{"40001", true}, {"40P01", true}, {"57014", true}, {"53100", true}, {"XX000", true},
		// A read-only transaction: the store's connection landed on a
		// standby (after a failover), or on a primary fenced read-only for
		// one. It was the handler's: 500 ProblemNotCommitted without
		// Retry-After, for as long as the failover lasted.
		{"25006", true},
	} {
		before := runs.Load()
		r := do(t, srv, "POST", "/refuse?code="+tc.code, "k-"+tc.code, "x")
		if tc.store {
			wantProblem(t, r, http.StatusServiceUnavailable, idempotency.ProblemUnavailable)
		} else {
			if r.err == nil && r.status == http.StatusServiceUnavailable {
				t.Errorf("SQLSTATE %s at the commit: 503 %s, the store called unavailable for the handler's error", tc.code, r.problem.Type)
				continue
			}
			wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemNotCommitted)
			if v := r.header.Get("Retry-After"); v != "" {
				t.Errorf("SQLSTATE %s: Retry-After %q on the handler's failure", tc.code, v)
			}
		}
		// Either way nothing was committed and the key is free.
		if r := do(t, srv, "POST", "/refuse?code="+tc.code, "k-"+tc.code, "x"); r.status == http.StatusCreated || runs.Load() != before+2 {
			t.Errorf("SQLSTATE %s: repeat %d after %d runs, want the handler run again", tc.code, r.status, runs.Load()-before)
		}
	}
	var n int
	if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM refusals").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v), want none: something committed", n, err)
	}
}
