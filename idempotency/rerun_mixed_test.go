package idempotency_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A request left for a re-run by a server with Options.Rerun, repeated to
// a server that cannot re-run it (a rolling deploy adding or removing the
// option, or a lower bound that the key's attempts reached): the key is
// not uncertain (the operator's tools leave it out, and a server whose
// Rerun allows runs it again), so the repeat is not told that an operator
// resolves it and that it will not run again: it gets ProblemRerun (503,
// with Retry-After), whose detail says why this server did not run it and
// names the command that shows the key, and the handler does not run here.
// The next repeat to a server that can re-run it gets the response.
func TestRerunPendingRepeatedToAServerThatCannotRerunIt(t *testing.T) {
	c := sentineltest.New(t)
	var calls atomic.Int32
	withRerun := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true, Rerun: 3},
		func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) <= 2 {
				idempotency.Uncertain(w, errors.New("provider timed out"))
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(sentinel.EffectKey(r.Context())))
		})
	var ranElsewhere atomic.Int32
	elsewhere := func(w http.ResponseWriter, r *http.Request) { ranElsewhere.Add(1); w.WriteHeader(http.StatusCreated) }
	check := func(name string, srv *httptest.Server) {
		t.Helper()
		r := do(t, srv, "POST", "/pay", "k-mixed", `{"amount":1}`)
		wantProblem(t, r, http.StatusServiceUnavailable, idempotency.ProblemRerun)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("%s: no Retry-After: %+v", name, r)
		}
		if d := r.problem.Detail; strings.Contains(d, "will not be run again") || !strings.Contains(d, "sentinel idempotency inspect k-mixed") ||
			!strings.Contains(d, "Options.Rerun") {
			t.Fatalf("%s: detail %q", name, d)
		}
	}
	wantProblem(t, do(t, withRerun, "POST", "/pay", "k-mixed", `{"amount":1}`), http.StatusServiceUnavailable, idempotency.ProblemRerun)
	check("without Rerun", serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true}, elsewhere))
	check("Rerun 1", serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true, Rerun: 1}, elsewhere))
	// Attempt 2, then a server whose bound (2) the key's attempts reached.
	wantProblem(t, do(t, withRerun, "POST", "/pay", "k-mixed", `{"amount":1}`), http.StatusServiceUnavailable, idempotency.ProblemRerun)
	check("Rerun 2 at attempt 2", serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true, Rerun: 2}, elsewhere))
	if n := ranElsewhere.Load(); n != 0 {
		t.Fatalf("a server that cannot re-run the key ran its handler %d times", n)
	}
	ex, err := c.Inspect(ctxT(t), idempotency.ExecutionKey("", "k-mixed"))
	if err != nil || !ex.Rerunnable() || ex.Attempt != 2 {
		t.Fatalf("key after the repeats elsewhere: %+v, %v", ex, err)
	}
	if r := do(t, withRerun, "POST", "/pay", "k-mixed", `{"amount":1}`); r.status != http.StatusCreated || !strings.HasPrefix(r.body, "se1-") {
		t.Fatalf("repeat to a server with Rerun: %+v", r)
	}
}
