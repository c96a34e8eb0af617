package idempotency_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Without Options.HardTTL, a handler's hard TTL is Once's default: the
// client's Config.OnceHardTTL, or the key's TTL when that is longer. The
// session that follows a 101 was bounded by Config.OnceHardTTL alone: with
// a TTL longer than it, a handler that switched protocols had its context
// ended sooner than the same handler that did not switch.
func TestSwitchedSessionDefaultHardTTLIsOnces(t *testing.T) {
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{OnceHardTTL: 500 * time.Millisecond}))
	var lasted atomic.Int64
	var cause atomic.Value
	mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, TTL: 3 * time.Second})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "echo")
		w.WriteHeader(http.StatusSwitchingProtocols)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		select {
		case <-r.Context().Done():
			cause.Store(context.Cause(r.Context()))
		case <-time.After(20 * time.Second):
		}
		lasted.Store(int64(time.Since(start)))
		_, _ = buf.WriteString("bye")
		_ = buf.Flush()
	})
	// A hijacked connection is not the server's: wait for the middleware
	// to return before the test ends.
	var served sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		defer served.Done()
		mw(handler).ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	resp, rest := upgrade(t, strings.TrimPrefix(srv.URL, "http://"), "switch-ttl")
	if resp.StatusCode != http.StatusSwitchingProtocols || rest != "bye" {
		t.Fatalf("got %d %q, want the 101 session", resp.StatusCode, rest)
	}
	served.Wait()
	if d := time.Duration(lasted.Load()); d < 2*time.Second {
		t.Fatalf("the session's context ended after %s (%v), want about the TTL, 3s: Once's default hard TTL is the longer of OnceHardTTL and the TTL", d, cause.Load())
	}
	if err, _ := cause.Load().(error); !errors.Is(err, sentinel.ErrHardTTL) {
		t.Fatalf("the session's context ended with %v, want HardTTL", err)
	}
}
