package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
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

// upgrade sends a POST asking to switch to the "echo" protocol with the
// Idempotency-Key key on a connection of its own, and returns the
// response and what the server sent after it.
func upgrade(t *testing.T, addr, key string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, "POST /session HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"+
		"Idempotency-Key: "+key+"\r\nContent-Length: 1\r\n\r\nx"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	rest, _ := io.ReadAll(br) // the handler closes the connection
	return resp, string(rest)
}

// A handler that switches protocols (WriteHeader(101), then takes the
// connection over with Hijack) had its 101 ignored and Hijack refused
// ("feature not supported"): the client asked to switch and got a 200
// with an empty body, stored and replayed to every repeat. The 101 now
// goes out live, Hijack works after it, nothing is stored (what follows
// is not HTTP) and the key is given back, as with NoEffect: a repeat
// switches again. Hijack before a 101 is still refused: the response is
// buffered until it is stored.
func TestSwitchingProtocolsPassesThrough(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		name := "plain"
		if transactional {
			name = "transactional"
		}
		t.Run(name, func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			var hijackErr atomic.Value
			mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: transactional})
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if _, _, err := http.NewResponseController(w).Hijack(); err == nil {
					t.Error("Hijack before a 101 succeeded: the buffered response would be lost")
				}
				w.Header().Set("Connection", "Upgrade")
				w.Header().Set("Upgrade", "echo")
				w.WriteHeader(http.StatusSwitchingProtocols)
				if _, err := w.Write([]byte("x")); err == nil {
					t.Error("a body after 101 was accepted")
				}
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					hijackErr.Store(err.Error())
					return
				}
				defer conn.Close()
				_, _ = buf.WriteString("hello over echo")
				_ = buf.Flush()
			})
			// The server does not wait for a hijacked connection's
			// handler: the middleware signals when it is done with the
			// key, so that no claim outlives the test.
			done := make(chan struct{}, 1)
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer func() { done <- struct{}{} }()
				mw(handler).ServeHTTP(w, r)
			}))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			t.Cleanup(srv.Close)
			addr := strings.TrimPrefix(srv.URL, "http://")
			for i := 1; i <= 2; i++ {
				resp, rest := upgrade(t, addr, "switch")
				if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" || rest != "hello over echo" {
					t.Fatalf("attempt %d: %d %v %q (Hijack: %v), want 101 Upgrade: echo, then the handler's bytes", i, resp.StatusCode, resp.Header, rest, hijackErr.Load())
				}
				select {
				case <-done:
				case <-ctxT(t).Done():
					t.Fatalf("attempt %d: the middleware did not return", i)
				}
				if got := runs.Load(); got != int64(i) {
					t.Fatalf("attempt %d: the handler ran %d times: the key was not given back", i, got)
				}
			}
			var stored int
			if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM executions WHERE result IS NOT NULL").Scan(&stored); err != nil || stored != 0 {
				t.Fatalf("%d results stored (%v), want none", stored, err)
			}
		})
	}
}

// A handler that switched protocols held its key for the whole session:
// the 101 promises nothing about the key (the docs: "the key is given
// back"), yet a repeat while the session ran got 409 in progress, and once
// the session outlived HardTTL, the key read as uncertain (without
// Transactional: executing, its lease expired): the repeat got 500
// ProblemUncertain, "an operator resolves it", and the key was listed
// for operators until the session ended. The key is now given back at the
// 101 (when the request asked to switch, Upgrade), and HardTTL still ends
// the handler's context: a repeat switches again at any time.
func TestSwitchedSessionGivesTheKeyBackAtThe101(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		name := "plain"
		if transactional {
			name = "transactional"
		}
		t.Run(name, func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			var cause atomic.Value
			inSession, pastHardTTL, finish := make(chan struct{}), make(chan struct{}), make(chan struct{})
			var finishOnce sync.Once
			end := func() { finishOnce.Do(func() { close(finish) }) }
			t.Cleanup(end) // the first session ends with the test, whatever happens
			mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: transactional,
				// A TTL of a second: at 300 ms, on a loaded machine, a slow
				// renewal lost the lease ("renewal deadline passed") before
				// HardTTL ended it.
				TTL: time.Second, HardTTL: 3 * time.Second})
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				w.Header().Set("Connection", "Upgrade")
				w.Header().Set("Upgrade", "echo")
				w.WriteHeader(http.StatusSwitchingProtocols)
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				if n == 1 {
					close(inSession)
					<-r.Context().Done()
					cause.Store(context.Cause(r.Context()))
					close(pastHardTTL)
					<-finish // the session goes on past HardTTL
				}
				_, _ = buf.WriteString("hello over echo")
				_ = buf.Flush()
			})
			var served sync.WaitGroup
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served.Add(1)
				defer served.Done()
				mw(handler).ServeHTTP(w, r)
			}))
			srv.Config.ErrorLog = log.New(io.Discard, "", 0)
			srv.Start()
			t.Cleanup(srv.Close)
			addr := strings.TrimPrefix(srv.URL, "http://")

			first := make(chan string, 1)
			go func() {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					first <- err.Error()
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
				_, _ = io.WriteString(conn, "POST /session HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n"+
					"Idempotency-Key: switch\r\nContent-Length: 1\r\n\r\nx")
				br := bufio.NewReader(conn)
				resp, err := http.ReadResponse(br, &http.Request{Method: "POST"})
				if err != nil {
					first <- err.Error()
					return
				}
				rest, _ := io.ReadAll(br)
				first <- resp.Status + " " + string(rest)
			}()
			select {
			case <-inSession:
			case <-ctxT(t).Done():
				t.Fatal("the first session did not start")
			}
			for i, when := range []string{"during the session", "during the session, past HardTTL"} {
				if i == 1 {
					<-pastHardTTL
				}
				resp, rest := upgrade(t, addr, "switch")
				if resp.StatusCode != http.StatusSwitchingProtocols || rest != "hello over echo" {
					t.Fatalf("a repeat %s: %d %q, want 101 and the handler's session: the key was not given back at the 101", when, resp.StatusCode, rest)
				}
			}
			if err, _ := cause.Load().(error); !errors.Is(err, sentinel.ErrHardTTL) {
				t.Fatalf("the session's context ended with %v, want HardTTL", err)
			}
			end()
			if got := <-first; got != "101 Switching Protocols hello over echo" {
				t.Fatalf("first: %s", got)
			}
			served.Wait()
			if got := runs.Load(); got != 3 {
				t.Fatalf("the handler ran %d times, want 3", got)
			}
			resp, _ := upgrade(t, addr, "switch")
			served.Wait()
			if resp.StatusCode != http.StatusSwitchingProtocols || runs.Load() != 4 {
				t.Fatalf("after the sessions: %d after %d runs, want a fourth session", resp.StatusCode, runs.Load())
			}
			ex, err := c.Inspect(ctxT(t), idempotency.ExecutionKey("", "switch"))
			if err != nil || ex.State != sentinel.StateClaimed || ex.LeaseAlive {
				t.Fatalf("the key: %+v (%v), want given back", ex, err)
			}
		})
	}
}
