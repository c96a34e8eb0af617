package idempotency_test

import (
	"encoding/base64"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Issue 26.3: a request path that decodes to text PostgreSQL cannot store
// (%00, %ff) is recorded with its claim all the same: the request runs
// once and its repeat is replayed.
func TestRequestPathWithUnstorableText(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, h.ServeHTTP)
	first := do(t, srv, "POST", "/charges/a%00b%ff", "k", "x")
	if first.status != 201 {
		t.Fatalf("first: %+v", first)
	}
	again := do(t, srv, "POST", "/charges/a%00b%ff", "k", "x")
	if again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" || again.body != first.body {
		t.Fatalf("repeat: %+v", again)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times", n)
	}
	rec, err := idempotency.Inspect(ctxT(t), c, "", "k")
	if err != nil {
		t.Fatal(err)
	}
	if want := "/charges/a\\x00b\uFFFD"; rec.Request.Path != want {
		t.Fatalf("recorded path %q, want %q", rec.Request.Path, want)
	}
}

// A refused completion whose response jsonb could not hold (a NUL in a
// header value) is recorded as result_base64; RefusedResponse reads it.
func TestRefusedResponseFromBase64Evidence(t *testing.T) {
	data := `{"fingerprint":"sha256:x","status":201,"header":{"X-Note":["a\u0000b"]},"body":"b2s="}`
	evs := []sentinel.Event{
		{Type: "claimed"},
		{Type: "started"},
		{Type: "completion_refused", Metadata: map[string]any{"result_base64": base64.StdEncoding.EncodeToString([]byte(data))}},
	}
	r, ok := idempotency.RefusedResponse(evs)
	if !ok || r.Status != 201 || string(r.Body) != "ok" || r.Header.Get("X-Note") != "a\x00b" {
		t.Fatalf("RefusedResponse = %+v, %v", r, ok)
	}
}
