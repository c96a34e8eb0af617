package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
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

// goneRig: a real server whose handler blocks until release, with the
// client's Warn+ logs and Observer outcomes recorded.
type goneRig struct {
	mu       sync.Mutex
	logs     []string
	outcomes []string
	starts   atomic.Int64
	served   chan int // status each outer request wrote, after the middleware returned
	runs     atomic.Int64
	release  chan struct{}
	started  chan struct{}
	srv      *httptest.Server
	c        *sentinel.Client
}

type statusW struct {
	http.ResponseWriter
	code int
}

func (s *statusW) WriteHeader(c int) { s.code = c; s.ResponseWriter.WriteHeader(c) }

func newGoneRig(t *testing.T, o idempotency.Options, outer func(w http.ResponseWriter, r *http.Request, next http.Handler)) *goneRig {
	g := &goneRig{served: make(chan int, 16), release: make(chan struct{}), started: make(chan struct{}, 16)}
	obs := &sentinel.Observer{
		OnceStart: func(ctx context.Context, ns, key string) context.Context { g.starts.Add(1); return ctx },
		OnceEnd: func(ctx context.Context, e sentinel.OnceEvent) {
			g.mu.Lock()
			g.outcomes = append(g.outcomes, string(e.Outcome))
			g.mu.Unlock()
		},
	}
	g.c = sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Observer: obs, Logger: slog.New(levelLog{func(l slog.Level, m string) {
		if l >= slog.LevelWarn {
			g.mu.Lock()
			g.logs = append(g.logs, l.String()+": "+m)
			g.mu.Unlock()
		}
	}})}))
	o.Scope = idempotency.SingleTenant
	mw := idempotency.Middleware(g.c, o)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := g.runs.Add(1)
		g.started <- struct{}{}
		<-g.release
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"run":%d,"ctx":%q}`, n, fmt.Sprint(r.Context().Err()))
	}))
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusW{ResponseWriter: w}
		if outer != nil {
			outer(sw, r, mw)
		} else {
			mw.ServeHTTP(sw, r)
		}
		g.served <- sw.code
	}))
	g.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	g.srv.Start()
	t.Cleanup(g.srv.Close)
	return g
}

// rawPost sends a POST over a raw TCP conn and returns the conn (unread).
func rawPost(t *testing.T, url, key string) net.Conn {
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /x HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Length: 1\r\n\r\nx", key)
	return conn
}

func waitFor(t *testing.T, cond func() bool) {
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that leaves while its repeat waits (Options.Wait) for the
// first request with its key is no failure of the store. When it left
// before the wait's claim (its request's context already ended, as when
// a middleware before this one took long, or the server noticed the
// disconnect between the first look at the key and the wait), that claim
// failed with the context and the request fell into the middleware's
// "could not be recorded" branch: an Error log and 503
// ProblemUnavailable, to a client that had gone. Now: no Warn or Error,
// a 409 in-progress answer, the Observer counts the call canceled (not
// error), and the key is as if the client had stayed: the first request's
// handler runs to its end and a repeat gets its response, replayed. A
// client that leaves mid-wait (its connection closed) was already so.
func TestClientGoneWhileWaitingIsNotAStoreFailure(t *testing.T) {
	for _, tx := range []bool{false, true} {
		for _, how := range []string{"before-wait", "mid-wait-tcp"} {
			t.Run(fmt.Sprintf("%s-tx%v", how, tx), func(t *testing.T) {
				arrived := make(chan struct{}, 1)
				var outer func(w http.ResponseWriter, r *http.Request, next http.Handler)
				if how == "before-wait" {
					// The server notices a client gone only once the body
					// is read; the middleware then starts with its
					// request's context ended.
					outer = func(w http.ResponseWriter, r *http.Request, next http.Handler) {
						if r.Header.Get("X-Slow") != "" {
							b, _ := io.ReadAll(r.Body)
							r.Body = io.NopCloser(strings.NewReader(string(b)))
							arrived <- struct{}{}
							<-r.Context().Done()
						}
						next.ServeHTTP(w, r)
					}
				}
				g := newGoneRig(t, idempotency.Options{Wait: 30 * time.Second, Transactional: tx}, outer)
				first := make(chan reply, 1)
				go func() { first <- do(t, g.srv, "POST", "/x", "k", "x") }()
				<-g.started
				if how == "before-wait" {
					ctx, cancel := context.WithCancel(context.Background())
					req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/x", strings.NewReader("x"))
					req.Header.Set(idempotency.HeaderKey, "k")
					req.Header.Set("X-Slow", "1")
					done := make(chan struct{})
					go func() {
						defer close(done)
						if resp, err := g.srv.Client().Do(req); err == nil {
							resp.Body.Close()
						}
					}()
					<-arrived
					cancel()
					<-done
				} else {
					conn := rawPost(t, g.srv.URL, "k")
					// Its first look (in progress) ended, and its wait began.
					waitFor(t, func() bool { return g.starts.Load() >= 3 })
					time.Sleep(100 * time.Millisecond)
					conn.Close()
				}
				if st := <-g.served; st != http.StatusConflict {
					t.Errorf("the request whose client left got %d, want 409", st)
				}
				close(g.release)
				if r := <-first; r.status != 201 {
					t.Fatalf("first: %+v", r)
				}
				<-g.served
				rep := do(t, g.srv, "POST", "/x", "k", "x")
				if rep.status != 201 || rep.header.Get(idempotency.HeaderReplayed) != "true" || g.runs.Load() != 1 {
					t.Fatalf("repeat: %+v, runs %d", rep, g.runs.Load())
				}
				g.mu.Lock()
				defer g.mu.Unlock()
				if len(g.logs) != 0 {
					t.Errorf("logged at Warn or above: %q", g.logs)
				}
				for _, o := range g.outcomes {
					if o == string(sentinel.OutcomeError) {
						t.Errorf("the Observer counted an error: %q", g.outcomes)
					}
				}
			})
		}
	}
}

// A client that left before the middleware claimed its key (its request's
// context already ended) is treated as if it had stayed, as docs/http.md
// says: the handler runs to its end with a live r.Context(), its response
// is stored, and the repeat gets it replayed; nothing is logged at Warn.
func TestClientGoneBeforeTheClaimRunsAsIfItStayed(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("tx%v", tx), func(t *testing.T) {
			arrived := make(chan struct{}, 1)
			g := newGoneRig(t, idempotency.Options{Wait: 30 * time.Second, Transactional: tx}, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
				if r.Header.Get("X-Slow") != "" {
					b, _ := io.ReadAll(r.Body) // the server notices a client gone only once the body is read
					r.Body = io.NopCloser(strings.NewReader(string(b)))
					arrived <- struct{}{}
					<-r.Context().Done()
				}
				next.ServeHTTP(w, r)
			})
			close(g.release)
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", g.srv.URL+"/x", strings.NewReader("x"))
			req.Header.Set(idempotency.HeaderKey, "k")
			req.Header.Set("X-Slow", "1")
			done := make(chan struct{})
			go func() {
				defer close(done)
				if resp, err := g.srv.Client().Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			<-arrived
			cancel()
			<-done
			if st := <-g.served; st != 201 {
				t.Fatalf("the request whose client left got %d, want the handler's 201", st)
			}
			rep := do(t, g.srv, "POST", "/x", "k", "x")
			if rep.status != 201 || rep.header.Get(idempotency.HeaderReplayed) != "true" || rep.body != `{"run":1,"ctx":"<nil>"}` || g.runs.Load() != 1 {
				t.Fatalf("repeat: %+v, runs %d", rep, g.runs.Load())
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.logs) != 0 {
				t.Errorf("logged at Warn or above: %q", g.logs)
			}
		})
	}
}
