package idempotency

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Concurrent repeats of a request left for a re-run: one takes the key
// over (a new token) between another's claim, which read the stopped
// attempt, and that one's guard, which reads the fingerprint of that
// attempt's run. The guard must not refuse the stale attempt as if it were
// another request's: it approves it, and Once's next claim, which can
// take over only that attempt (now superseded), finds the re-run in
// progress (409, or the response with Options.Wait). Before, the refusal
// gave that repeat ErrUncertain, and the middleware the uncertain 500
// ("it will not be run again: an operator resolves it") for a key being
// re-run at that moment.
func TestRerunGuardApprovesASupersededAttempt(t *testing.T) {
	c := sentineltest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	calls := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if calls == 1 {
			Uncertain(w, errors.New("provider timed out"))
			return
		}
		entered <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	m := Middleware(c, Options{Scope: SingleTenant, Rerun: 3})(h).(*middleware)
	send := func() int {
		req := httptest.NewRequest("POST", "/pay", strings.NewReader(`{"amount":1}`))
		req.Header.Set(HeaderKey, "k-race")
		rec := httptest.NewRecorder()
		m.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := send(); code != http.StatusServiceUnavailable {
		t.Fatalf("first request: %d", code)
	}
	onceKey := ExecutionKey("", "k-race")
	stopped, err := c.Inspect(ctx, onceKey)
	if err != nil || !stopped.Rerunnable() {
		t.Fatalf("after Uncertain: %+v, %v", stopped, err)
	}
	fp, known, err := m.fingerprintOf(ctx, stopped.Namespace, onceKey, stopped.Token)
	if err != nil || !known {
		t.Fatalf("fingerprint of the stopped attempt: %q %v %v", fp, known, err)
	}
	guard := m.rerunGuard(fp, false)
	if ok, err := guard(ctx, stopped.Namespace, onceKey, stopped.Token); !ok || err != nil {
		t.Fatalf("guard for the same request: %v %v", ok, err)
	}
	if ok, err := guard(ctx, stopped.Namespace, onceKey+"-absent", stopped.Token); ok || err != nil {
		t.Fatalf("guard for a key without that attempt: %v %v", ok, err)
	}
	if ok, err := m.rerunGuard("sha256:other", false)(ctx, stopped.Namespace, onceKey, stopped.Token); ok || err != nil {
		t.Fatalf("guard for another request: %v %v", ok, err)
	}
	// Another repeat re-runs the key and holds it.
	done := make(chan int, 1)
	go func() { done <- send() }()
	<-entered
	now, err := c.Inspect(ctx, onceKey)
	if err != nil || now.Token == stopped.Token || now.Attempt != 2 {
		t.Fatalf("re-run: %+v, %v", now, err)
	}
	// The guard of a repeat that read the stopped attempt before the
	// takeover: not refused.
	if ok, err := guard(ctx, stopped.Namespace, onceKey, stopped.Token); !ok || err != nil {
		t.Fatalf("guard for the superseded attempt of the same request: %v %v (refused: the repeat gets ErrUncertain for a key being re-run)", ok, err)
	}
	// Nor is anything run for it: the repeat now gets 409 (in progress).
	if code := send(); code != http.StatusConflict {
		t.Fatalf("repeat during the re-run: %d", code)
	}
	close(release)
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("re-run: %d", code)
	}
	if calls != 2 {
		t.Fatalf("handler ran %d times", calls)
	}
}
