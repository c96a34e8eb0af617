package idempotency_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A response over MaxResponseBytes that the handler marked as changing
// nothing (NoEffect, or a status Options.Store refuses) was stored as "the
// request was processed, its response too large": the key was spent, the
// client was told never to retry it and to ask the operators, though the
// handler had said nothing happened. Nothing is stored: the key is given
// back, as NoEffect promises, and the retry runs the handler again.
func TestTooLargeResponseThatChangedNothingGivesTheKeyBack(t *testing.T) {
	for _, how := range []string{"NoEffect", "Store"} {
		t.Run(how, func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			o := idempotency.Options{Scope: idempotency.SingleTenant, MaxResponseBytes: 64}
			if how == "Store" {
				o.Store = func(status int) bool { return status != http.StatusBadRequest }
			}
			srv := serve(t, c, o, func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) == 1 {
					if how == "NoEffect" {
						idempotency.NoEffect(w)
					}
					w.WriteHeader(http.StatusBadRequest) // a long validation report
					fmt.Fprint(w, strings.Repeat("field amount: must be positive; ", 10))
					return
				}
				w.WriteHeader(http.StatusCreated)
				fmt.Fprint(w, `{"charge":"ch_1"}`)
			})
			r := do(t, srv, "POST", "/charges", "k", "x")
			wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemResponseTooLarge)
			if !strings.Contains(r.problem.Detail, "runs the request again") || strings.Contains(r.problem.Detail, "will not run again") {
				t.Fatalf("the detail does not send the client to retry: %s", r.problem.Detail)
			}
			r = do(t, srv, "POST", "/charges", "k", "x")
			if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 {
				t.Fatalf("retry: %d %s, runs %d; want the handler run again", r.status, r.body, runs.Load())
			}
		})
	}
}

// The same in the last attempt Options.Rerun allows: an earlier attempt
// may have had its effect, so the key is not given back but uncertain,
// and the request is told so, not sent to retry.
func TestTooLargeNoEffectInTheLastRerunIsUncertain(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, MaxResponseBytes: 64, Rerun: 2}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		idempotency.NoEffect(w)
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, strings.Repeat("card network unreachable; ", 10))
	})
	wantProblem(t, do(t, srv, "POST", "/charges", "k", "x"), http.StatusServiceUnavailable, idempotency.ProblemRerun)
	for i := 0; i < 2; i++ {
		wantProblem(t, do(t, srv, "POST", "/charges", "k", "x"), http.StatusInternalServerError, idempotency.ProblemUncertain)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2", n)
	}
}

// MaxResponseBytes bounds the body; the headers come on top, and a
// response whose stored form (headers included) was over the client's
// Config.MaxResultSize failed only when Sentinel encoded it. The handler
// had charged the card, and the client got 500 ProblemNotStored ("could
// not be stored or read back: sentinel: result codec failed: ...", the
// execution key and an operator's SetResult advice) instead of its 201;
// in transactional mode the same "the request was processed", though it
// had been rolled back and a retry ran it again. Now the size is checked
// before the response is stored: without Transactional, the request gets
// its response and the key stores "too large" (repeats get
// ProblemResponseTooLarge, which says not to use a new key); with it,
// nothing is committed and the request is told to retry.
func TestHeadersTooLargeToStore(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", tx), func(t *testing.T) {
			c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{MaxResultSize: 128 << 10}))
			var runs atomic.Int64
			srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: tx, MaxResponseBytes: 32 << 10},
				func(w http.ResponseWriter, r *http.Request) {
					runs.Add(1)
					// 150 KB of header: "<" is stored as \u003c, six bytes.
					w.Header().Set("Link", strings.Repeat("<", 25000))
					w.WriteHeader(http.StatusCreated)
					fmt.Fprint(w, `{"charge":"ch_1"}`)
				})
			first := do(t, srv, "POST", "/charges", "k", "x")
			if tx {
				wantProblem(t, first, http.StatusInternalServerError, idempotency.ProblemResponseTooLarge)
				if !strings.Contains(first.problem.Detail, "nothing was committed; retrying with this key runs the request again") {
					t.Fatalf("detail: %s", first.problem.Detail)
				}
				do(t, srv, "POST", "/charges", "k", "x")
				if n := runs.Load(); n != 2 {
					t.Fatalf("the handler ran %d times, want 2: nothing was committed, the retry runs it", n)
				}
				return
			}
			if first.status != http.StatusCreated || first.body != `{"charge":"ch_1"}` {
				t.Fatalf("first: %d %s, want the handler's 201", first.status, first.body)
			}
			for i := 0; i < 2; i++ {
				r := do(t, srv, "POST", "/charges", "k", "x")
				wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemResponseTooLarge)
				if !strings.Contains(r.problem.Detail, "do not repeat it with another key") || strings.Contains(r.problem.Detail, idempotency.KeyPrefix) {
					t.Fatalf("detail: %s", r.problem.Detail)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times, want 1", n)
			}
		})
	}
}
