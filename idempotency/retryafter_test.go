package idempotency_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A stored "try later" (a 503 with Retry-After, stored as every response
// is without Transactional) was replayed with its Retry-After: the client
// waited as told and retried, and got the same stored answer, with the
// same invitation, forever. A replay cannot change, so it no longer
// carries Retry-After (nor is it stored); the first response keeps the
// handler's.
func TestReplayDoesNotInviteARetry(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Retry-After", "30")
		http.Error(w, "the ledger is busy", http.StatusServiceUnavailable)
	})
	first := do(t, srv, "POST", "/charges", "busy", "x")
	if first.status != http.StatusServiceUnavailable || first.header.Get("Retry-After") != "30" {
		t.Fatalf("first: %d %v, want the handler's 503 with its Retry-After", first.status, first.header)
	}
	for i := 1; i <= 2; i++ {
		r := do(t, srv, "POST", "/charges", "busy", "x")
		if r.status != http.StatusServiceUnavailable || r.header.Get(idempotency.HeaderReplayed) != "true" || r.body != first.body {
			t.Fatalf("repeat %d: %d %q %v, want the stored 503 replayed", i, r.status, r.body, r.header)
		}
		if v := r.header.Values("Retry-After"); len(v) != 0 {
			t.Fatalf("repeat %d: the replay carries Retry-After %q: it invites a retry that gets the same answer", i, v)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times, want 1", runs.Load())
	}
	var stored bool
	if err := c.Pool().QueryRow(ctxT(t), "SELECT bool_or(position('Retry-After' in convert_from(result, 'UTF8')) > 0) FROM executions").Scan(&stored); err != nil || stored {
		t.Fatalf("Retry-After was stored (%v)", err)
	}
}

// With Transactional a 429 (too many requests: "slow down and send it
// again") was stored by default and replayed to every retry: the client
// slowed down and got the same 429 for ever. Not storing it is safe there
// (the transaction rolls back), so the default Store refuses it: the
// retry runs the handler.
func TestTransactional429IsNotStoredByDefault(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	if r := do(t, srv, "POST", "/charges", "slow", "x"); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "1" {
		t.Fatalf("first: %d %v, want the handler's 429 with its Retry-After", r.status, r.header)
	}
	if r := do(t, srv, "POST", "/charges", "slow", "x"); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 {
		t.Fatalf("retry: %d %v after %d runs, want 201 from a second run", r.status, r.header, runs.Load())
	}
}
