package idempotency_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A handler that ran past its HardTTL and answered all the same (it
// charged the card, and said so) has its completion refused: the key is
// uncertain, for an operator. The request that ran it got the uncertain
// problem, "did not finish with a known outcome ... may or may not have
// taken effect", although the handler had finished and the middleware
// held its answer: the client was told "unknown" about a charge the
// server knew it had made. It gets the handler's response now, as
// written; its repeats get the uncertain problem until an operator
// resolves the key (resolve --refused gives them that same response).
func TestRefusedCompletionSendsTheHandlersResponseLive(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, TTL: 300 * time.Millisecond, HardTTL: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			<-r.Context().Done()               // HardTTL passed
			time.Sleep(600 * time.Millisecond) // and the provider answered late
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"charge":"ch_1"}`))
		})
	r := do(t, srv, "POST", "/charges", "late", "x")
	if r.status != http.StatusCreated || r.body != `{"charge":"ch_1"}` || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("the request that ran the handler got %d %q (%s), want the handler's 201", r.status, r.problem.Type, r.body)
	}
	r = do(t, srv, "POST", "/charges", "late", "x")
	wantProblem(t, r, http.StatusInternalServerError, idempotency.ProblemUncertain)
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times", runs.Load())
	}
	rec, err := idempotency.Inspect(ctxT(t), c, "", "late")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Refused == nil || rec.Refused.Status != http.StatusCreated {
		t.Fatalf("the key's refused response %+v: want the handler's 201 kept for the operator", rec.Refused)
	}
}

// With Options.Rerun the same request got 503 ProblemRerun ("did not
// finish ... repeat it"): it gets the handler's answer too, and a repeat
// still re-runs the handler, whose effect is deduplicated downstream.
func TestRefusedCompletionWithRerunSendsTheHandlersResponseLive(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true, Rerun: 3, TTL: 300 * time.Millisecond, HardTTL: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				<-r.Context().Done()
				time.Sleep(600 * time.Millisecond)
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("ch_1"))
		})
	if r := do(t, srv, "POST", "/charges", "late", "x"); r.status != http.StatusCreated || r.body != "ch_1" {
		t.Fatalf("the request that ran the handler got %d %q (%s), want the handler's 201", r.status, r.problem.Type, r.body)
	}
	if r := do(t, srv, "POST", "/charges", "late", "x"); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("repeat: %d %s after %d runs, want a re-run's 201", r.status, r.body, runs.Load())
	}
}

// With Options.Rerun and attempts left, that refused completion leaves
// the key for the repeat to re-run, not uncertain: the log said "the key
// is uncertain for its repeats until an operator resolves it", at Warn,
// the page WithRerun promises not to send for a failure the provider
// absorbs. It is Info now, and says the repeat runs the handler again.
func TestRefusedCompletionWithRerunLogsNoUncertainKey(t *testing.T) {
	var logged lockedBuffer
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{
		Logger: slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelInfo}))}))
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true, Rerun: 3, TTL: 300 * time.Millisecond, HardTTL: 300 * time.Millisecond},
		func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
			time.Sleep(600 * time.Millisecond)
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("ch_1"))
		})
	if r := do(t, srv, "POST", "/charges", "late", "x"); r.status != http.StatusCreated {
		t.Fatalf("the request that ran the handler got %d %q (%s), want the handler's 201", r.status, r.problem.Type, r.body)
	}
	log := logged.String()
	if strings.Contains(log, `level=WARN msg="idempotency`) || strings.Contains(log, "until an operator resolves it") {
		t.Errorf("the log tells of an uncertain key, which a repeat re-runs:\n%s", log)
	}
	if !strings.Contains(log, `level=INFO msg="idempotency: the handler answered, but its completion was refused`) ||
		!strings.Contains(log, "a repeat of the request runs the handler again") {
		t.Errorf("the refusal is not logged at Info with what happens next:\n%s", log)
	}
}
