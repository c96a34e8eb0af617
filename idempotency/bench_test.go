package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// BenchmarkMiddleware measures one request through a real HTTP server: a
// plain handler (the floor), a first request with a fresh key (claim,
// complete), and a replay (one statement).
func BenchmarkMiddleware(b *testing.B) {
	c := sentineltest.New(b)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_1"}`)
	})
	send := func(b *testing.B, url, key string) {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"amount":100}`))
		if key != "" {
			req.Header.Set(idempotency.HeaderKey, key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			b.Fatal(resp.Status)
		}
	}
	plain := httptest.NewServer(h)
	defer plain.Close()
	srv := httptest.NewServer(idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant})(h))
	defer srv.Close()
	tx := httptest.NewServer(idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true})(h))
	defer tx.Close()

	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			send(b, plain.URL, "")
		}
	})
	b.Run("first", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			send(b, srv.URL, "first-"+strconv.Itoa(i))
		}
	})
	b.Run("first-transactional", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			send(b, tx.URL, "tx-"+strconv.Itoa(i))
		}
	})
	send(b, srv.URL, "replayed")
	b.Run("replay", func(b *testing.B) {
		for b.Loop() {
			send(b, srv.URL, "replayed")
		}
	})
}
