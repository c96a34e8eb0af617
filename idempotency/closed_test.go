package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A request whose claim or wait Client.Close ended (the server shutting
// down in a rolling deploy) is no failure of the store. It fell into the
// middleware's "could not be recorded" branch: an Error log ("check the
// database") and a 503 blaming the store. Now it gets 503
// ProblemUnavailable with Retry-After, a detail saying the server is
// shutting down and nothing was recorded for this request, logged at
// Info; the Observer counts it closed; the key is left as it was: a
// waiter's key stays the first request's (its response is replayed to
// the next repeat), and a claim made and given back as Close ended it is
// no record (the next request with the key, on another server, runs the
// handler, and gets no replay).
//
// Two servers share the database, as in a rolling deploy: "old" is
// closed, "new" runs on.
func TestClientClosedClaimOrWaitIsNotAStoreFailure(t *testing.T) {
	for _, tx := range []bool{false, true} {
		for _, how := range []string{"wait", "claim"} {
			t.Run(fmt.Sprintf("%s-tx%v", how, tx), func(t *testing.T) {
				big := sentineltest.WithPoolConfig(func(c *pgxpool.Config) { c.MaxConns = 16 })
				var mu sync.Mutex
				var logs, outcomes []string
				obs := &sentinel.Observer{OnceEnd: func(ctx context.Context, e sentinel.OnceEvent) {
					mu.Lock()
					outcomes = append(outcomes, string(e.Outcome))
					mu.Unlock()
				}}
				oldC := sentineltest.New(t, big, sentineltest.WithConfig(sentinel.Config{Observer: obs, Logger: slog.New(levelLog{func(l slog.Level, m string) {
					mu.Lock()
					logs = append(logs, l.String()+": "+m)
					mu.Unlock()
				}})}))
				newC := sentineltest.New(t, big)
				var runs atomic.Int64
				release := make(chan struct{})
				started := make(chan struct{}, 4)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					started <- struct{}{}
					<-release
					w.WriteHeader(201)
					fmt.Fprintf(w, `{"run":%d}`, n)
				})
				o := idempotency.Options{Wait: 30 * time.Second, Transactional: tx, Scope: idempotency.SingleTenant}
				serve := func(c *sentinel.Client) *httptest.Server {
					srv := httptest.NewUnstartedServer(idempotency.Middleware(c, o)(h))
					srv.Config.ErrorLog = log.New(io.Discard, "", 0)
					srv.Start()
					t.Cleanup(srv.Close)
					return srv
				}
				oldS, newS := serve(oldC), serve(newC)

				var got reply
				first := make(chan reply, 1)
				if how == "wait" {
					// The first request runs on the new server; its repeat
					// waits for it on the old one, which then closes.
					go func() { first <- do(t, newS, "POST", "/x", "k", "x") }()
					<-started
					second := make(chan reply, 1)
					go func() { second <- do(t, oldS, "POST", "/x", "k", "x") }()
					admin := sentineltest.Pool(t)
					waitFor(t, func() bool {
						var n int
						_ = admin.QueryRow(ctxT(t), "SELECT count(*) FROM executions WHERE waiters > 0").Scan(&n)
						return n > 0
					})
					oldC.Close()
					got = <-second
				} else {
					// The old server closed, a request comes to it still
					// (its listener drains): its claim is given back.
					close(release)
					oldC.Close()
					got = do(t, oldS, "POST", "/x", "k", "x")
				}
				wantProblem(t, got, http.StatusServiceUnavailable, idempotency.ProblemUnavailable)
				if got.header.Get("Retry-After") == "" || got.problem.Key != "k" ||
					!strings.Contains(got.problem.Detail, "shutting down") || !strings.Contains(got.problem.Detail, "nothing was recorded for this request") {
					t.Errorf("the request Close ended: Retry-After %q, problem %+v", got.header.Get("Retry-After"), got.problem)
				}

				// What was recorded: for the waiter, nothing (the key is
				// the first request's, still running); for the claim,
				// given back: no record of a response, free to run.
				rec, err := idempotency.Inspect(ctxT(t), newC, "", "k")
				if how == "claim" && !errors.Is(err, sentinel.ErrNotFound) {
					t.Fatalf("the key after the 503: %+v, %v; want none, as before the claim", rec, err)
				}
				if how == "wait" && (err != nil || rec.Response != nil || rec.Execution.Token != 1 || !rec.Execution.LeaseAlive ||
					rec.Execution.State != sentinel.StateClaimed && rec.Execution.State != sentinel.StateExecuting) {
					t.Fatalf("the key after the 503: %+v, %v; want the first request's claim", rec, err)
				}
				if how == "wait" {
					close(release)
					if r := <-first; r.status != 201 {
						t.Fatalf("first: %+v", r)
					}
				}
				// The key as it was: the wait's first request's, replayed;
				// the claim given back, so the next request runs.
				r := do(t, newS, "POST", "/x", "k", "x")
				if r.status != 201 || r.body != `{"run":1}` || runs.Load() != 1 ||
					(how == "wait") != (r.header.Get(idempotency.HeaderReplayed) == "true") {
					t.Fatalf("the next request with the key: %+v, runs %d", r, runs.Load())
				}
				if r := do(t, newS, "POST", "/x", "k", "x"); r.status != 201 || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 1 {
					t.Fatalf("its repeat: %+v, runs %d", r, runs.Load())
				}

				mu.Lock()
				defer mu.Unlock()
				closed := false
				for _, o := range outcomes {
					closed = closed || o == string(sentinel.OutcomeClosed)
					if o == string(sentinel.OutcomeError) {
						t.Errorf("the Observer counted an error: %q", outcomes)
					}
				}
				if !closed {
					t.Errorf("the Observer did not count the call closed: %q", outcomes)
				}
				said := false
				for _, l := range logs {
					said = said || strings.HasPrefix(l, "INFO: idempotency: the server is shutting down")
					if strings.HasPrefix(l, "WARN") || strings.HasPrefix(l, "ERROR") {
						t.Errorf("logged at Warn or above: %q", l)
					}
				}
				if !said {
					t.Errorf("the shutdown was not logged at Info: %q", logs)
				}
			})
		}
	}
}
