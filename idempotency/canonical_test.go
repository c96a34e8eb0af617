package idempotency_test

import (
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Issue 26.10: with CanonicalJSON, {"amount":100,"Amount":200} and the
// same members swapped decode to different amounts with encoding/json
// (case-insensitive, last wins): the swapped repeat is another request
// (422), never a replay of the first.
func TestCanonicalJSONMembersEqualUnderFolding(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, CanonicalJSON: true}, h.ServeHTTP)
	jsonCT := []string{"Content-Type", "application/json"}
	a := `{"amount":100,"Amount":200}`
	b := `{"Amount":200,"amount":100}`
	if r := do(t, srv, "POST", "/charges", "k", a, jsonCT...); r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "k", b, jsonCT...), 422, idempotency.ProblemKeyReused)
	// Nested, and a name given twice.
	do(t, srv, "POST", "/charges", "n", `{"meta":{"x":1,"X":2}}`, jsonCT...)
	wantProblem(t, do(t, srv, "POST", "/charges", "n", `{"meta":{"X":2,"x":1}}`, jsonCT...), 422, idempotency.ProblemKeyReused)
	do(t, srv, "POST", "/charges", "d", `{"amount":1,"amount":2}`, jsonCT...)
	wantProblem(t, do(t, srv, "POST", "/charges", "d", `{"amount":2}`, jsonCT...), 422, idempotency.ProblemKeyReused)
	// The same bytes still replay.
	if r := do(t, srv, "POST", "/charges", "k", a, jsonCT...); r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("the same bytes again: %+v", r)
	}
	if n := h.runs.Load(); n != 3 {
		t.Fatalf("the handler ran %d times, want 3", n)
	}
}
