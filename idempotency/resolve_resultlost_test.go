package idempotency_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A request's key that completed with its response not stored (every
// repeat gets 500 ProblemNotStored) could not be resolved: Resolve
// refused a completed key, and the only way to give its repeats an answer
// was the generic set-result with a hand-built encoding. Resolve now
// stores the response at the key's token, with the checks it makes for an
// uncertain key (the request's fingerprint, a stale token), and the
// repeat gets it replayed without running the handler again.
func TestResolveAResponseNotStored(t *testing.T) {
	c := sentineltest.New(t)
	ctx := ctxT(t)
	var runs atomic.Int64
	scope := func(r *http.Request) string { return r.Header.Get("X-Account") }
	srv := serve(t, c, idempotency.Options{Scope: scope}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charge_id":"ch_1"}`))
	})
	acct := []string{"X-Account", "acct_7", "Content-Type", "application/json"}
	if r := do(t, srv, "POST", "/charges", "pay-9", `{"amount":4200}`, acct...); r.status != http.StatusCreated {
		t.Fatalf("first request: %+v", r)
	}
	// The response is lost as a result over MaxResultSize loses it.
	execKey := idempotency.ExecutionKey("acct_7", "pay-9")
	if _, err := c.Pool().Exec(ctx, "UPDATE "+pgx.Identifier{c.Config().Schema, "executions"}.Sanitize()+
		" SET result = NULL, result_error = 'response over Config.MaxResultSize' WHERE namespace = $1 AND key = $2",
		c.Config().Namespace, execKey); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "pay-9", `{"amount":4200}`, acct...), http.StatusInternalServerError, idempotency.ProblemNotStored)

	rec, err := idempotency.Inspect(ctx, c, "acct_7", "pay-9")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Execution.ResultLost() || rec.Request.Fingerprint == "" {
		t.Fatalf("record: %+v", rec)
	}
	// A response built for another request, and a stale token, are
	// refused and store nothing.
	other, err := idempotency.NewResponse(rec.Request.Fingerprint+"0", 201, nil, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Resolve(ctx, c, "acct_7", "pay-9", other); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("Resolve of a response built for another request: %v, want a refusal naming the fingerprint", err)
	}
	resp, err := idempotency.NewResponse(rec.Request.Fingerprint, http.StatusCreated,
		http.Header{"Content-Type": {"application/json"}}, []byte(`{"charge_id":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Resolve(ctx, c, "acct_7", "pay-9", resp, sentinel.WithToken(rec.Execution.Token+1)); err == nil {
		t.Fatal("Resolve with a stale token stored the response")
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "pay-9", `{"amount":4200}`, acct...), http.StatusInternalServerError, idempotency.ProblemNotStored)

	token, err := idempotency.Resolve(ctx, c, "acct_7", "pay-9", resp, sentinel.WithToken(rec.Execution.Token))
	if err != nil {
		t.Fatal(err)
	}
	if token != rec.Execution.Token {
		t.Errorf("Resolve returned token %d, want the key's %d (storing does not change it)", token, rec.Execution.Token)
	}
	r := do(t, srv, "POST", "/charges", "pay-9", `{"amount":4200}`, acct...)
	if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" || r.body != `{"charge_id":"ch_1"}` || runs.Load() != 1 {
		t.Fatalf("repeat after Resolve: %+v, runs %d", r, runs.Load())
	}
}
