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

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// With Options.Rerun and Options.Wait, a repeat that waits for the first
// attempt re-runs the key when that attempt stops. It used to re-run it
// inside the wait, whose deadline (Options.Wait, or the client leaving)
// cancels the claim's ctx: when the wait ran out between the re-run's
// claim and its handler, the claim was given back without running the
// handler, and counted as an attempt. With Rerun 2 the key was then
// uncertain, for an operator, though the handler ran once: the request
// whose handler called Uncertain had been told to repeat it ("it runs
// again"), and its repeat got the uncertain 500. The waiter now re-runs
// the key outside the wait, on the request's own ctx, which, as for any
// request that runs the handler, nothing cancels but the lease.
func TestRerunByAWaiterIsNotCutByTheWait(t *testing.T) {
	// The waiter must be woken and claim within it, under load too.
	const wait = 3 * time.Second
	hook := func(msg string) {
		if strings.Contains(msg, "re-running a key whose executor stopped") {
			// The waiter's Options.Wait runs out between its re-run's
			// claim and its handler.
			time.Sleep(wait + 500*time.Millisecond)
		}
	}
	var mu sync.Mutex
	var outcomes []sentinel.OnceOutcome
	obs := &sentinel.Observer{OnceEnd: func(_ context.Context, e sentinel.OnceEvent) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, e.Outcome)
	}}
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Logger: slog.New(onLog{hook}), Observer: obs}))
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: 2, Wait: wait}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-release
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(sentinel.EffectKey(r.Context())))
	})
	first, waiter := make(chan reply, 1), make(chan reply, 1)
	go func() { first <- do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`) }()
	<-started
	go func() { waiter <- do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`) }()
	waitForWaiter(t, c)
	close(release)
	wantProblem(t, <-first, http.StatusServiceUnavailable, idempotency.ProblemRerun)
	w := <-waiter
	if w.status != http.StatusCreated || !strings.HasPrefix(w.body, "se1-") || runs.Load() != 2 {
		t.Fatalf("the waiter got %d %s after %d runs, want the re-run's 201 after 2", w.status, w.body, runs.Load())
	}
	if r := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`); r.status != http.StatusCreated || r.body != w.body || runs.Load() != 2 {
		t.Fatalf("a later repeat got %d %s after %d runs, want the re-run's response replayed", r.status, r.body, runs.Load())
	}
	// The wait that hands the re-run over is no error in the metrics:
	// it ends with the key rerun pending.
	mu.Lock()
	defer mu.Unlock()
	for _, o := range outcomes {
		if o == sentinel.OutcomeError || o == sentinel.OutcomeUncertain {
			t.Fatalf("Once outcomes %v: a waiter's hand-over counted as %q", outcomes, o)
		}
	}
}

// waitForWaiter returns once a caller waits for the test schema's only key.
func waitForWaiter(t *testing.T, c *sentinel.Client) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := c.Pool().QueryRow(ctxT(t), "SELECT waiters FROM executions").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no caller ever waited for the key")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
