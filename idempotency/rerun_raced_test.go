package idempotency_test

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// With Options.Rerun, the request whose handler called Uncertain gets
// ProblemRerun: "repeat it, it runs again". A repeat of it (the client's
// retry, or a waiter with Options.Wait, woken as the attempt stopped) may
// re-run the key before the middleware reads the key to say which attempt
// comes next. The key has moved on to that re-run: the request was still
// told, and the log still said, that it had come to a server whose
// Options.Rerun does not allow another attempt and that "this request
// did not run it", the answer for a server that cannot re-run the key,
// though its own handler ran and this very server re-runs it. It gets
// the detail of a request whose attempt stopped, and no such log.
func TestRerunOwnAttemptRerunByARacingRepeat(t *testing.T) {
	var (
		srvURL  atomic.Pointer[string]
		once    sync.Once
		entered = make(chan struct{})
		release = make(chan struct{})
		repeat  = make(chan reply, 1)
		logged  sync.Map
		tt      = t
	)
	// Once the first attempt stopped (sentinel logs so before Once
	// returns), a repeat re-runs the key, and holds it, before the
	// middleware reads the key for the first request.
	hook := func(msg string) {
		logged.Store(msg, true)
		if !strings.Contains(msg, "attempt stopped without an outcome") {
			return
		}
		once.Do(func() {
			go func() { repeat <- doURL(tt, *srvURL.Load(), "pay-1", `{"amount":500}`) }()
			select {
			case <-entered:
			case <-time.After(30 * time.Second):
				tt.Error("the repeat never re-ran the key")
			}
		})
	}
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Logger: slog.New(onLog{hook})}))
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: 3}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		close(entered)
		<-release
		w.WriteHeader(http.StatusCreated)
	})
	u := srv.URL
	srvURL.Store(&u)
	first := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`)
	close(release)
	wantProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRerun)
	if first.header.Get("Retry-After") == "" {
		t.Errorf("no Retry-After: %+v", first)
	}
	if d := first.problem.Detail; strings.Contains(d, "this request did not run it") || strings.Contains(d, "Options.Rerun") {
		t.Errorf("the request whose own handler ran was told it came to a server that cannot re-run it: %q", d)
	}
	if r := <-repeat; r.status != http.StatusCreated {
		t.Fatalf("the repeat that re-ran the key: %+v", r)
	}
	logged.Range(func(k, _ any) bool {
		if strings.Contains(k.(string), "does not allow another attempt") {
			t.Errorf("logged %q for the server that re-ran the key", k)
		}
		return true
	})
	if r := do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`); r.status != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("a later repeat got %d after %d runs, want the re-run's 201 after 2", r.status, runs.Load())
	}
}

// doURL posts body to url's /charges with key, from any goroutine.
func doURL(t *testing.T, url, key, body string) reply {
	req, err := http.NewRequest("POST", url+"/charges", strings.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	req.Header.Set(idempotency.HeaderKey, key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	return reply{status: resp.StatusCode, header: resp.Header}
}
