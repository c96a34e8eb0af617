package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// countingBody is a request body that counts the bytes read from it.
type countingBody struct {
	r    *strings.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { return nil }

// A request without a principal is refused (403) before its body is
// read: an over-large one gets 403, the real answer, not 413, and a
// small one is not read either.
func TestNoScopeIsRefusedBeforeTheBodyIsRead(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	mw := idempotency.Middleware(c, idempotency.Options{MaxBodyBytes: 16,
		Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})(h)
	for _, size := range []int{1, 17, 1 << 20} {
		body := &countingBody{r: strings.NewReader(strings.Repeat("x", size))}
		req := httptest.NewRequest(http.MethodPost, "/charges", body)
		req.Header.Set(idempotency.HeaderKey, "k1")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, req)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), idempotency.ProblemNoScope) {
			t.Fatalf("a %d-byte body without a principal: %d %s, want 403 %s", size, w.Code, w.Body, idempotency.ProblemNoScope)
		}
		if body.read != 0 {
			t.Fatalf("a %d-byte body without a principal: %d bytes were read before the refusal", size, body.read)
		}
	}
	if h.runs.Load() != 0 {
		t.Fatalf("the handler ran %d times", h.runs.Load())
	}
}
