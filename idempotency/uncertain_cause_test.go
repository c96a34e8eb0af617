package idempotency_test

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// The cause a handler gives Uncertain is why the outcome is unknown, for
// the key's history; it does not decide the outcome. It used to be
// wrapped into the handler's error, so that an error the handler got from
// code that marks its errors for sentinel (sentinel.Retryable for a
// provider's timeout, as a worker behind OnceRetry wants it; Final; or
// an error of a nested Once) decided instead: a Retryable cause handed the
// key back, so the request got 503 ProblemUnavailable ("nothing was
// recorded") and its retry ran the handler again, as attempt 1, without
// Options.Rerun too: the second charge Uncertain is there to prevent. A
// Final cause completed the key with an error (ProblemUnreplayable for
// ever, not uncertain in the operator's tools); a cause matching
// sentinel.ErrInProgress answered 409. Each is the uncertain problem now,
// or with Options.Rerun ProblemRerun and a counted re-run.
func TestUncertainCauseDoesNotDecideTheOutcome(t *testing.T) {
	causes := map[string]func(error) error{
		"Retryable": sentinel.Retryable,
		"Final":     sentinel.Final,
		"in progress": func(err error) error {
			return fmt.Errorf("%w (a nested call: %w)", err, sentinel.ErrInProgress)
		},
	}
	for name, mark := range causes {
		for _, rerun := range []int{0, 3} {
			t.Run(fmt.Sprintf("%s/Rerun%d", name, rerun), func(t *testing.T) {
				c := sentineltest.New(t)
				var runs atomic.Int64
				srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: rerun}, func(w http.ResponseWriter, r *http.Request) {
					if runs.Add(1) == 1 {
						idempotency.Uncertain(w, mark(errors.New("the card network timed out after the charge was sent")))
						return
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "attempt %d", sentinel.Attempt(r.Context()))
				})
				first := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`)
				repeat := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`)
				if rerun == 0 {
					wantProblem(t, first, http.StatusInternalServerError, idempotency.ProblemUncertain)
					wantProblem(t, repeat, http.StatusInternalServerError, idempotency.ProblemUncertain)
					if n := runs.Load(); n != 1 {
						t.Fatalf("the handler ran %d times for a key its first run left uncertain", n)
					}
					ex, err := c.Inspect(ctxT(t), idempotency.ExecutionKey("", "pay-1"))
					if err != nil || ex.State != sentinel.StateExecuting || ex.LeaseAlive {
						t.Fatalf("the key is not uncertain: %+v %v", ex, err)
					}
					return
				}
				wantProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRerun)
				if repeat.status != http.StatusCreated || repeat.body != "attempt 2" {
					t.Fatalf("the repeat: %d %s, want 201 from attempt 2", repeat.status, repeat.body)
				}
			})
		}
	}
}
