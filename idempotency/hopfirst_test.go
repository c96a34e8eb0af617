package idempotency_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// What the package documentation and docs/http.md say of the headers a
// handler sets, through a real server: credentials, the Connection header
// and the headers it names go out with the first response only; the other
// per-connection headers (Keep-Alive, Proxy-Connection, Upgrade on a
// final response) go out with no response, the first included. The
// documentation said they went out with the first response, as
// credentials do.
func TestPerConnectionHeadersOnTheFirstResponseAndReplays(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Connection", "keep-alive")
		h.Set("Upgrade", "h2c")
		h.Set("Connection", "X-Trace")
		h.Set("X-Trace", "t1")
		h.Set("Set-Cookie", "session=s1")
		h.Set("X-Note", "kept")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	})
	first := do(t, srv, "POST", "/charges", "k", "x")
	again := do(t, srv, "POST", "/charges", "k", "x")
	if first.status != 201 || again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("first %d, repeat %d %v", first.status, again.status, again.header)
	}
	for _, name := range []string{"Connection", "X-Trace", "Set-Cookie", "X-Note"} {
		if first.header.Get(name) == "" {
			t.Errorf("the first response lacks %s: %v", name, first.header)
		}
	}
	for _, name := range []string{"Connection", "X-Trace", "Set-Cookie"} {
		if again.header.Get(name) != "" {
			t.Errorf("the replay carries %s: %v", name, again.header)
		}
	}
	if again.header.Get("X-Note") != "kept" {
		t.Errorf("the replay lacks X-Note: %v", again.header)
	}
	for _, name := range []string{"Keep-Alive", "Proxy-Connection", "Upgrade"} {
		if first.header.Get(name) != "" || again.header.Get(name) != "" {
			t.Errorf("%s went out: first %q, replay %q", name, first.header.Get(name), again.header.Get(name))
		}
	}
}
