package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A handler that calls NoEffect after its key's lease was lost (it ran
// past HardTTL, or its heartbeats could not renew the lease) knows that
// nothing happened: its response is sent, and, as nobody took the key over,
// the key is given back under its token (the hand-back is guarded by the
// claim's owner and token, not by a live lease), so a repeat runs the
// handler again instead of getting the uncertain problem. When an operator
// took the key over meanwhile (Reconcile, a new token), nothing is written
// under the old token: the request still gets the handler's response, and
// the key stays the operator's.
func TestNoEffectAfterTheLeaseWasLostGivesTheKeyBack(t *testing.T) {
	for _, how := range []string{"hard TTL", "heartbeat blocked", "reconciled", "hard TTL, transactional"} {
		t.Run(how, func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			var cause atomic.Value
			// A TTL of a second, not 300 ms: on a loaded machine the
			// repeat's own lease, at 300 ms, could be lost before its
			// completion ("renewal deadline passed").
			opts := idempotency.Options{Scope: idempotency.SingleTenant, TTL: time.Second, HardTTL: time.Second}
			if how == "heartbeat blocked" {
				opts.HardTTL = time.Hour
			}
			opts.Transactional = how == "hard TTL, transactional"
			srv := serve(t, c, opts, func(w http.ResponseWriter, r *http.Request) {
				if runs.Add(1) > 1 {
					w.WriteHeader(http.StatusCreated)
					return
				}
				if how == "heartbeat blocked" {
					// Another transaction holds the key's row: no renewal
					// lands until the lease has expired.
					tx, err := c.Pool().Begin(context.Background())
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := tx.Exec(context.Background(), "SELECT 1 FROM executions WHERE key = $1 FOR UPDATE", idempotency.ExecutionKey("", "k")); err != nil {
						t.Error(err)
					}
					select {
					case <-r.Context().Done():
					case <-time.After(20 * time.Second):
					}
					_ = tx.Rollback(context.Background())
				}
				<-r.Context().Done()
				cause.Store(context.Cause(r.Context()))
				if how == "reconciled" {
					// Once the lease has expired on the database's clock.
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
						_, err := c.Reconcile(context.Background(), idempotency.ExecutionKey("", "k"))
						if err == nil {
							break
						}
						if time.Now().After(deadline) {
							t.Error(err)
							break
						}
					}
				}
				time.Sleep(600 * time.Millisecond) // the provider refused the connection, late
				idempotency.NoEffect(w)
				http.Error(w, "card network unreachable", http.StatusBadGateway)
			})
			r := do(t, srv, "POST", "/charges", "k", "x")
			if r.status != http.StatusBadGateway || r.body != "card network unreachable\n" {
				t.Fatalf("the request that ran the handler got %d %q (%s), want the handler's 502", r.status, r.problem.Type, r.body)
			}
			if err, _ := cause.Load().(error); !errors.Is(err, sentinel.ErrLeaseLost) {
				t.Fatalf("the handler's ctx ended with %v, want the lease lost", err)
			}
			r = do(t, srv, "POST", "/charges", "k", "x")
			if how == "reconciled" {
				wantProblem(t, r, http.StatusServiceUnavailable, idempotency.ProblemReconciling)
				return
			}
			if r.status != http.StatusCreated || runs.Load() != 2 {
				t.Fatalf("repeat: %d %q (%s) after %d runs, want the handler run again", r.status, r.problem.Type, r.body, runs.Load())
			}
		})
	}
}
