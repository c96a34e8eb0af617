package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A server that bounds request bodies before the middleware (with
// http.MaxBytesReader, as many routers' body-limit middleware does) had
// a body over its limit answered 400 "Bad Request", type about:blank,
// "reading the request body failed: http: request body too large": the
// client was told its request was malformed. It gets 413
// ProblemBodyTooLarge with the server's limit, as a body over
// Options.MaxBodyBytes does.
func TestBodyOverTheServersLimitIs413(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant})(h)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 8)
		mw.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	r := do(t, srv, "POST", "/charges", "k", "123456789")
	wantProblem(t, r, http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	if !strings.Contains(r.problem.Detail, "at most 8 bytes") {
		t.Fatalf("the detail does not give the limit: %s", r.problem.Detail)
	}
	if r := do(t, srv, "POST", "/charges", "k", "12345678"); r.status != http.StatusCreated || h.runs.Load() != 1 {
		t.Fatalf("a body at the limit: %d %s", r.status, r.body)
	}
}
