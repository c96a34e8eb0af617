package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Client.Close while a request's handler runs (a rolling deploy whose
// server closed its Sentinel client before its handlers finished).
//
// Transactional: Close ends the key's lease, which cancels the handler's
// ctx; the middleware's statements after the handler, and the completion,
// are refused, and the handler's transaction (its writes and the key's
// completion) rolls back, the key given back. The request fell into the
// "could not be recorded" branch: an Error log telling the operators to
// "check the database and the Sentinel schema", and a 503 "Idempotency
// store unavailable" blaming the store. Now it gets 503 ProblemUnavailable
// "Server shutting down" with Retry-After, a detail saying that the
// handler's transaction was rolled back and nothing was recorded, logged
// at Info; the next request with the key, on another server, runs the
// handler afresh, and its writes commit once.
//
// Without Transactional the handler's response, when it comes within the
// lease (Close stops its renewals but does not free its row), is stored as
// usual: the request gets it, a repeat on another server gets it replayed,
// and the middleware logs nothing above Info.
//
// Two servers share the database: "old" is closed, "new" runs on. The
// handler ends either with its ctx (Close cancels it), or ignoring it,
// once Close has returned.
func TestClientClosedWhileTheHandlerRuns(t *testing.T) {
	for _, tx := range []bool{true, false} {
		for _, how := range []string{"ctx", "ignores ctx"} {
			t.Run(fmt.Sprintf("tx%v-%s", tx, how), func(t *testing.T) {
				if _, err := sentineltest.Pool(t).Exec(ctxT(t), "CREATE TABLE closed_orders (run int NOT NULL)"); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				var logs []string
				oldC := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Logger: slog.New(levelLog{func(l slog.Level, m string) {
					mu.Lock()
					logs = append(logs, l.String()+": "+m)
					mu.Unlock()
				}})}))
				newC := sentineltest.New(t)
				var runs atomic.Int64
				started := make(chan struct{}, 4)
				closed := make(chan struct{})
				var cause atomic.Value
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := runs.Add(1)
					if t := idempotency.Tx(r.Context()); t != nil {
						if _, err := t.Exec(r.Context(), "INSERT INTO closed_orders VALUES ($1)", n); err != nil {
							http.Error(w, err.Error(), 500)
							return
						}
					}
					started <- struct{}{}
					if n == 1 {
						if how == "ctx" {
							<-r.Context().Done()
							cause.Store(context.Cause(r.Context()))
						} else {
							<-closed
						}
					}
					w.WriteHeader(201)
					fmt.Fprintf(w, `{"run":%d}`, n)
				})
				o := idempotency.Options{Transactional: tx, Scope: idempotency.SingleTenant}
				oldS := serve(t, oldC, o, h)
				newS := serve(t, newC, o, h)

				first := make(chan reply, 1)
				go func() { first <- do(t, oldS, "POST", "/orders", "k", "x") }()
				<-started
				oldC.Close()
				close(closed)
				got := <-first
				if how == "ctx" {
					if err, _ := cause.Load().(error); !errors.Is(err, sentinel.ErrClosed) {
						t.Fatalf("the handler's ctx ended with %v, want ErrClosed", err)
					}
				}

				mu.Lock()
				var ours []string // the middleware's own lines
				for _, l := range logs {
					if strings.Contains(l, "idempotency:") {
						ours = append(ours, l)
					}
				}
				mu.Unlock()
				for _, l := range ours {
					if strings.HasPrefix(l, "WARN") || strings.HasPrefix(l, "ERROR") {
						t.Errorf("logged at Warn or above: %q", l)
					}
				}

				if !tx {
					if got.status != 201 || got.body != `{"run":1}` {
						t.Fatalf("the request Close interrupted: %d %q (%s), want the handler's 201", got.status, got.problem.Type, got.body)
					}
					r := do(t, newS, "POST", "/orders", "k", "x")
					if r.status != 201 || r.body != `{"run":1}` || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 1 {
						t.Fatalf("its repeat on the new server: %+v, runs %d; want the stored 201 replayed", r, runs.Load())
					}
					return
				}

				wantProblem(t, got, http.StatusServiceUnavailable, idempotency.ProblemUnavailable)
				d := got.problem.Detail
				if got.header.Get("Retry-After") == "" || got.problem.Key != "k" || got.problem.Title != "Server shutting down" ||
					!strings.Contains(d, "shutting down") || !strings.Contains(d, "rolled back") || !strings.Contains(d, "nothing was recorded for this request") ||
					!strings.Contains(d, "retry with the same Idempotency-Key") {
					t.Errorf("the request Close ended: Retry-After %q, problem %+v", got.header.Get("Retry-After"), got.problem)
				}
				said := false
				for _, l := range ours {
					said = said || strings.HasPrefix(l, "INFO: idempotency: the server is shutting down") && strings.Contains(l, "rolled back")
				}
				if !said {
					t.Errorf("the shutdown was not logged at Info: %q", ours)
				}

				// Nothing was recorded: the handler's write rolled back and
				// the key was given back, so the next request runs afresh.
				var rows int
				if err := sentineltest.Pool(t).QueryRow(ctxT(t), "SELECT count(*) FROM closed_orders").Scan(&rows); err != nil || rows != 0 {
					t.Fatalf("rows after the 503: %d, %v; want none", rows, err)
				}
				r := do(t, newS, "POST", "/orders", "k", "x")
				if r.status != 201 || r.body != `{"run":2}` || r.header.Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 {
					t.Fatalf("the retry on the new server: %+v, runs %d; want the handler run again", r, runs.Load())
				}
				if r := do(t, newS, "POST", "/orders", "k", "x"); r.status != 201 || r.body != `{"run":2}` || r.header.Get(idempotency.HeaderReplayed) != "true" {
					t.Fatalf("its repeat: %+v", r)
				}
				if err := sentineltest.Pool(t).QueryRow(ctxT(t), "SELECT count(*) FROM closed_orders WHERE run = 2").Scan(&rows); err != nil || rows != 1 {
					t.Fatalf("rows of the retry: %d, %v; want one", rows, err)
				}
			})
		}
	}
}
