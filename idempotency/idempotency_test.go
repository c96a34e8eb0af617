package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashEnv) != "" {
		os.Exit(crashChild())
	}
	code := sentineltest.Run(m)
	if code == 0 {
		http.DefaultClient.CloseIdleConnections() // the examples' client
		// The pgtemp launcher keeps one goroutine for the life of the process.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/sentinel-coordination/sentinel/internal/pgtemp.startOnLockedThread.func1.1")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serveRaw runs h on a real HTTP server for the life of the process and
// returns its URL.
func serveRaw(h http.Handler) string {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	return srv.URL
}

// serve runs h behind the middleware on a real HTTP server.
func serve(t *testing.T, c *sentinel.Client, o idempotency.Options, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(idempotency.Middleware(c, o)(h))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // handler panics are expected here
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status  int
	header  http.Header
	body    string
	problem idempotency.Problem
	err     error // transport error (e.g. the handler panicked)
}

func do(t *testing.T, srv *httptest.Server, method, path, key, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(idempotency.HeaderKey, key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("problem body %q: %v", b, err)
		}
	}
	return r
}

func wantProblem(t *testing.T, r reply, status int, typ string) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("transport error %v, want %d %s", r.err, status, typ)
	}
	if r.status != status || r.problem.Type != typ || r.problem.Status != status || r.problem.Title == "" {
		t.Fatalf("got %d %q (%s), want %d %s", r.status, r.problem.Type, r.body, status, typ)
	}
}

// charge is a handler that counts its runs.
type charge struct{ runs atomic.Int64 }

func (c *charge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Location", fmt.Sprintf("/charges/%d", n))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":%d,"request":%q}`, n, b)
}

func TestFirstRunsThenReplays(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true}, h.ServeHTTP)

	first := do(t, srv, "POST", "/charges", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":100}`)
	if first.status != 201 || first.header.Get(idempotency.HeaderReplayed) != "" || first.header.Get("Location") != "/charges/1" {
		t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
	}
	for i := 0; i < 3; i++ {
		again := do(t, srv, "POST", "/charges", "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":100}`)
		if again.status != 201 || again.body != first.body || again.header.Get("Location") != "/charges/1" ||
			again.header.Get("Content-Type") != "application/json" || again.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("replay: %d %v %s", again.status, again.header, again.body)
		}
	}
	// The quoted (Structured Field) form is the same key.
	if r := do(t, srv, "POST", "/charges", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"amount":100}`); r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("quoted key not replayed: %d %s", r.status, r.body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestMissingAndInvalidKeys(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	required := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true}, h.ServeHTTP)
	optional := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, h.ServeHTTP)

	wantProblem(t, do(t, required, "POST", "/x", "", ""), 400, idempotency.ProblemKeyMissing)
	for _, key := range []string{`"unterminated`, `a b`, `"a"; p=1`, `"bad\escape"`, "ключ", strings.Repeat("k", 256), `""`} {
		wantProblem(t, do(t, required, "POST", "/x", key, ""), 400, idempotency.ProblemKeyInvalid)
	}
	wantProblem(t, do(t, required, "POST", "/x", "a", "", idempotency.HeaderKey, "b"), 400, idempotency.ProblemKeyInvalid)
	if h.runs.Load() != 0 {
		t.Fatal("handler ran for a rejected request")
	}
	// Longest allowed key, and an escaped quote.
	for _, key := range []string{strings.Repeat("k", 255), `"say \"hi\""`} {
		if r := do(t, required, "POST", "/x", key, ""); r.status != 201 {
			t.Fatalf("key %q: %d %s", key, r.status, r.body)
		}
	}
	// Without Required a request with no key is not protected; safe methods
	// always pass through.
	before := h.runs.Load()
	do(t, optional, "POST", "/x", "", "")
	do(t, optional, "POST", "/x", "", "")
	do(t, required, "GET", "/x", "g", "")
	do(t, required, "GET", "/x", "g", "")
	if got := h.runs.Load() - before; got != 4 {
		t.Fatalf("pass-through requests ran %d times, want 4", got)
	}
}

func TestDifferentRequestSameKey(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, h.ServeHTTP)
	if r := do(t, srv, "POST", "/charges", "k1", `{"amount":100}`); r.status != 201 {
		t.Fatal(r.status)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "k1", `{"amount":999}`), 422, idempotency.ProblemKeyReused)
	wantProblem(t, do(t, srv, "POST", "/refunds", "k1", `{"amount":100}`), 422, idempotency.ProblemKeyReused)
	wantProblem(t, do(t, srv, "PUT", "/charges", "k1", `{"amount":100}`), 422, idempotency.ProblemKeyReused)
	wantProblem(t, do(t, srv, "POST", "/charges?x=1", "k1", `{"amount":100}`), 422, idempotency.ProblemKeyReused)
	if h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", h.runs.Load())
	}
}

func TestBodyTooLarge(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, MaxBodyBytes: 8}, h.ServeHTTP)
	wantProblem(t, do(t, srv, "POST", "/x", "k", "123456789"), 413, idempotency.ProblemBodyTooLarge)
	if r := do(t, srv, "POST", "/x", "k", "12345678"); r.status != 201 {
		t.Fatal(r.status, r.body)
	}
}

// blocking is a handler that signals its start and waits for release.
type blocking struct {
	runs    atomic.Int64
	started chan struct{}
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (b *blocking) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.runs.Add(1)
	b.started <- struct{}{}
	<-b.release
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "done")
}

func TestConcurrentRepeatsGet409(t *testing.T) {
	c := sentineltest.New(t)
	h := newBlocking()
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, h.ServeHTTP)

	first := make(chan reply, 1)
	go func() { first <- do(t, srv, "POST", "/jobs", "job-1", "x") }()
	<-h.started

	const n = 8
	var wg sync.WaitGroup
	replies := make(chan reply, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); replies <- do(t, srv, "POST", "/jobs", "job-1", "x") }()
	}
	wg.Wait()
	close(replies)
	for r := range replies {
		wantProblem(t, r, 409, idempotency.ProblemInProgress)
		if r.header.Get("Retry-After") != "1" || r.problem.Key != "job-1" {
			t.Fatalf("409 without Retry-After or key: %v %+v", r.header, r.problem)
		}
	}
	// A different request with the key is refused as reuse, even in flight.
	wantProblem(t, do(t, srv, "POST", "/jobs", "job-1", "other body"), 422, idempotency.ProblemKeyReused)

	close(h.release)
	if r := <-first; r.status != 202 || r.body != "done" {
		t.Fatalf("first: %+v", r)
	}
	if r := do(t, srv, "POST", "/jobs", "job-1", "x"); r.status != 202 || r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("after completion: %+v", r)
	}
	if h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", h.runs.Load())
	}
}

func TestWaitForFirst(t *testing.T) {
	c := sentineltest.New(t)
	h := newBlocking()
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Wait: 30 * time.Second}, h.ServeHTTP)

	first := make(chan reply, 1)
	go func() { first <- do(t, srv, "POST", "/jobs", "job-2", "x") }()
	<-h.started
	waiters := make(chan reply, 3)
	for i := 0; i < 3; i++ {
		go func() { waiters <- do(t, srv, "POST", "/jobs", "job-2", "x") }()
	}
	time.Sleep(200 * time.Millisecond) // let the waiters find it in progress
	close(h.release)
	if r := <-first; r.status != 202 {
		t.Fatalf("first: %+v", r)
	}
	for i := 0; i < 3; i++ {
		if r := <-waiters; r.status != 202 || r.body != "done" || r.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("waiter: %+v", r)
		}
	}
	if h.runs.Load() != 1 {
		t.Fatalf("handler ran %d times", h.runs.Load())
	}

	// A short wait still ends in 409.
	h2 := newBlocking()
	srv2 := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Wait: 100 * time.Millisecond}, h2.ServeHTTP)
	go func() { first <- do(t, srv2, "POST", "/jobs", "job-3", "x") }()
	<-h2.started
	wantProblem(t, do(t, srv2, "POST", "/jobs", "job-3", "x"), 409, idempotency.ProblemInProgress)
	close(h2.release)
	<-first
}

func TestPanickingHandlerLeavesKeyUncertain(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		panic("card network exploded")
	})
	if r := do(t, srv, "POST", "/charges", "pay-9", "x"); r.err == nil {
		t.Fatalf("the panicking request got a response: %+v", r)
	}
	r := do(t, srv, "POST", "/charges", "pay-9", "x")
	wantProblem(t, r, 500, idempotency.ProblemUncertain)
	if r.problem.Key != "pay-9" || r.problem.State != "executing" || r.problem.Token == 0 || !strings.Contains(r.problem.Detail, "pay-9") {
		t.Fatalf("problem does not name the key: %+v", r.problem)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times: an uncertain key was re-run", runs.Load())
	}
	// Once an operator reconciles it, repeats are told so.
	if _, err := c.Reconcile(ctxT(t), r.problem.Key, sentinel.WithToken(r.problem.Token)); err == nil {
		t.Fatal("Reconcile found the HTTP key under the bare name; it must be scoped")
	}
	ex := onlyExecution(t, c)
	if _, err := c.Reconcile(ctxT(t), ex); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "pay-9", "x"), 503, idempotency.ProblemReconciling)
}

// onlyExecution returns the key of the single execution in the test schema.
func onlyExecution(t *testing.T, c *sentinel.Client) string {
	t.Helper()
	var key string
	if err := c.Pool().QueryRow(ctxT(t), "SELECT key FROM executions").Scan(&key); err != nil {
		t.Fatal(err)
	}
	return key
}

func TestScopePerPrincipal(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }}, h.ServeHTTP)
	a := do(t, srv, "POST", "/charges", "same", "x", "X-Account", "acct_a")
	b := do(t, srv, "POST", "/charges", "same", "x", "X-Account", "acct_b")
	a2 := do(t, srv, "POST", "/charges", "same", "x", "X-Account", "acct_a")
	if a.body == b.body || a2.body != a.body || a2.header.Get(idempotency.HeaderReplayed) != "true" || h.runs.Load() != 2 {
		t.Fatalf("scopes: a %s, b %s, a again %s; runs %d", a.body, b.body, a2.body, h.runs.Load())
	}
}

func TestResponseTooLarge(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	var writeErr error
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, MaxResponseBytes: 10}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		_, writeErr = w.Write([]byte(strings.Repeat("x", 11)))
	})
	wantProblem(t, do(t, srv, "POST", "/report", "big", ""), 500, idempotency.ProblemResponseTooLarge)
	if writeErr != idempotency.ErrResponseTooLarge {
		t.Fatalf("handler's Write returned %v", writeErr)
	}
	// The request was processed: repeats get the same error, no second run,
	// and are told not to send it again under a new key.
	r := do(t, srv, "POST", "/report", "big", "")
	wantProblem(t, r, 500, idempotency.ProblemResponseTooLarge)
	if !strings.Contains(r.problem.Detail, "do not repeat it with another key") {
		t.Fatalf("the detail does not say what to do next: %s", r.problem.Detail)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}

func TestRetentionAndPrune(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Namespace: "http"}, h.ServeHTTP)
	do(t, srv, "POST", "/charges", "old", "x")
	if r := do(t, srv, "POST", "/charges", "old", "x"); r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatal("not replayed before pruning")
	}
	// Age the stored response past the retention period.
	if _, err := c.Pool().Exec(ctxT(t), "UPDATE executions SET completed_at = completed_at - interval '25 hours'"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Prune(ctxT(t), 24*time.Hour, sentinel.WithNamespace("http"))
	if err != nil || res.Executions != 1 {
		t.Fatalf("prune: %+v, %v", res, err)
	}
	if r := do(t, srv, "POST", "/charges", "old", "x"); r.status != 201 || r.header.Get(idempotency.HeaderReplayed) != "" || h.runs.Load() != 2 {
		t.Fatalf("after pruning the key runs again: %+v, runs %d", r, h.runs.Load())
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"a\"b"`, `"unterminated`, `8e03978e-40d5`, `""`, `"x";y`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := idempotency.ParseKey(v)
		if err != nil {
			return
		}
		if k == "" || len(k) > idempotency.MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q", v, k)
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q with byte %#x", v, k, k[i])
			}
		}
	})
}

// ledger is a transactional handler: it books a row in the request's
// transaction, then fails in the way the test asks.
type ledger struct {
	runs atomic.Int64
	fail atomic.Value // string: "", "panic", "500", "big", "block"
	hold chan struct{}
	in   chan struct{}
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.runs.Add(1)
	tx := idempotency.Tx(r.Context())
	if tx == nil {
		http.Error(w, "no transaction", 500)
		return
	}
	var id int64
	if err := tx.QueryRow(r.Context(), "INSERT INTO bookings (key) VALUES ($1) RETURNING id", r.Header.Get(idempotency.HeaderKey)).Scan(&id); err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	switch l.fail.Load() {
	case "panic":
		panic("crash after the write, before the response")
	case "500":
		http.Error(w, "downstream failed", 500)
		return
	case "big":
		_, _ = w.Write([]byte(strings.Repeat("x", 100)))
		return
	case "block":
		l.in <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-l.hold:
		}
	}
	w.WriteHeader(201)
	fmt.Fprintf(w, "booking %d", id)
}

func bookings(t *testing.T, c *sentinel.Client) int {
	t.Helper()
	var n int
	if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM bookings").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func newLedger(t *testing.T) (*sentinel.Client, *ledger) {
	c := sentineltest.New(t)
	if _, err := sentineltest.Pool(t).Exec(ctxT(t), "CREATE TABLE bookings (id bigserial PRIMARY KEY, key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	l := &ledger{hold: make(chan struct{}), in: make(chan struct{}, 1)}
	l.fail.Store("")
	return c, l
}

func TestTransactionalExactlyOnce(t *testing.T) {
	c, l := newLedger(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true, MaxResponseBytes: 50}, l.ServeHTTP)

	// A crash between the write and the response: nothing is left behind,
	// the key is not uncertain, and the retry runs afresh.
	l.fail.Store("panic")
	if r := do(t, srv, "POST", "/book", "b1", "x"); r.err == nil {
		t.Fatalf("panicking handler answered %+v", r)
	}
	if n := bookings(t, c); n != 0 {
		t.Fatalf("%d bookings after the crash, want 0", n)
	}
	// A 5xx rolls back and is not stored.
	l.fail.Store("500")
	if r := do(t, srv, "POST", "/book", "b1", "x"); r.status != 500 || r.header.Get(idempotency.HeaderReplayed) != "" || bookings(t, c) != 0 {
		t.Fatalf("5xx: %+v, %d bookings", r, bookings(t, c))
	}
	// Too large to store: rolled back.
	l.fail.Store("big")
	wantProblem(t, do(t, srv, "POST", "/book", "b1", "x"), 500, idempotency.ProblemResponseTooLarge)
	if bookings(t, c) != 0 {
		t.Fatal("an oversized response committed its writes")
	}

	l.fail.Store("")
	first := do(t, srv, "POST", "/book", "b1", "x")
	if first.status != 201 || !strings.HasPrefix(first.body, "booking ") {
		t.Fatalf("first success: %+v", first)
	}
	for i := 0; i < 3; i++ {
		r := do(t, srv, "POST", "/book", "b1", "x")
		if r.status != 201 || r.body != first.body || r.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("replay: %+v", r)
		}
	}
	if n := bookings(t, c); n != 1 {
		t.Fatalf("%d bookings, want exactly 1", n)
	}
	if got := l.runs.Load(); got != 4 {
		t.Fatalf("handler ran %d times, want 4 (3 rolled back + 1)", got)
	}
}

// The server's Sentinel client dies while the handler holds uncommitted
// writes: the completion is refused, everything rolls back, and another
// server completes the request exactly once.
func TestTransactionalLostLeaseCommitsNothing(t *testing.T) {
	c, l := newLedger(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true}, l.ServeHTTP)
	l.fail.Store("block")
	done := make(chan reply, 1)
	go func() { done <- do(t, srv, "POST", "/book", "b2", "x") }()
	<-l.in
	// A repeat while it runs: 409.
	wantProblem(t, do(t, srv, "POST", "/book", "b2", "x"), 409, idempotency.ProblemInProgress)
	c.Close() // the lease ends; the handler's context is cancelled
	r := <-done
	wantProblem(t, r, 503, idempotency.ProblemUnavailable)
	if n := bookings(t, c); n != 0 {
		t.Fatalf("%d bookings after the lost lease, want 0", n)
	}

	l.fail.Store("")
	other := serve(t, sentineltest.New(t), idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true}, l.ServeHTTP)
	if r := do(t, other, "POST", "/book", "b2", "x"); r.status != 201 {
		t.Fatalf("retry on another server: %+v", r)
	}
	if r := do(t, other, "POST", "/book", "b2", "x"); r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("not replayed: %+v", r)
	}
	if n := bookings(t, c); n != 1 {
		t.Fatalf("%d bookings, want 1", n)
	}
}

func TestStoreFalseFreesTheKey(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Store: func(status int) bool { return status != http.StatusTooManyRequests }},
		func(w http.ResponseWriter, r *http.Request) {
			if runs.Add(1) == 1 {
				http.Error(w, "slow down", http.StatusTooManyRequests)
				return
			}
			http.Error(w, "boom", http.StatusInternalServerError)
		})
	if r := do(t, srv, "POST", "/x", "k", ""); r.status != 429 || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("first: %+v", r)
	}
	// Not stored: the retry runs the handler; its 500 is stored by default.
	if r := do(t, srv, "POST", "/x", "k", ""); r.status != 500 || r.header.Get(idempotency.HeaderReplayed) != "" {
		t.Fatalf("second: %+v", r)
	}
	if r := do(t, srv, "POST", "/x", "k", ""); r.status != 500 || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 2 {
		t.Fatalf("third: %+v, runs %d", r, runs.Load())
	}
}

// A client that gives up does not cut the handler short: the retry gets
// the real outcome.
func TestClientDisconnectDoesNotCancelHandler(t *testing.T) {
	c := sentineltest.New(t)
	h := newBlocking()
	var handlerErr atomic.Value
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		handlerErr.Store(fmt.Sprint(r.Context().Err()))
	})
	ctx, cancel := context.WithCancel(ctxT(t))
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/jobs", strings.NewReader("x"))
	req.Header.Set(idempotency.HeaderKey, "walk-away")
	errc := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-h.started
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the cancelled request got a response")
	}
	close(h.release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := do(t, srv, "POST", "/jobs", "walk-away", "x")
		if r.status == 202 {
			if r.header.Get(idempotency.HeaderReplayed) != "true" || h.runs.Load() != 1 || handlerErr.Load() != "<nil>" {
				t.Fatalf("retry: %+v, runs %d, handler ctx %v", r, h.runs.Load(), handlerErr.Load())
			}
			return
		}
		if r.status != 409 || time.Now().After(deadline) {
			t.Fatalf("retry: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A waiter whose first request gives the key back (a 5xx in transactional
// mode) runs the handler itself, and Options.Wait does not cut it short.
func TestWaiterTakesOverAGivenBackKey(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	started := make(chan struct{}, 2)
	var lateErr atomic.Value
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true, Wait: 300 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		started <- struct{}{}
		if n == 1 {
			time.Sleep(100 * time.Millisecond)
			http.Error(w, "upstream down", http.StatusServiceUnavailable) // rolled back, key given back
			return
		}
		time.Sleep(500 * time.Millisecond) // longer than Wait
		lateErr.Store(fmt.Sprint(r.Context().Err()))
		w.WriteHeader(http.StatusCreated)
	})
	first := make(chan reply, 1)
	go func() { first <- do(t, srv, "POST", "/x", "give-back", "") }()
	<-started
	second := do(t, srv, "POST", "/x", "give-back", "")
	if r := <-first; r.status != 503 {
		t.Fatalf("first: %+v", r)
	}
	if second.status != 201 || second.header.Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 || lateErr.Load() != "<nil>" {
		t.Fatalf("waiter: %+v, runs %d, handler ctx %v", second, runs.Load(), lateErr.Load())
	}
}

func TestBadOptionsPanicAtConstruction(t *testing.T) {
	c := sentineltest.New(t)
	for i, o := range []idempotency.Options{{}, {TTL: -1}, {Wait: -time.Second}, {MaxResponseBytes: -1}, {TTL: 2 * time.Second, HardTTL: time.Second}, {MaxResponseBytes: 15 << 20},
		{TTL: time.Millisecond}, {Rerun: math.MaxInt32 + 1}, {Namespace: "pay\nments"}, {Namespace: "\xff"}, {Namespace: strings.Repeat("n", sentinel.MaxNamespaceLen+1)}} {
		if i > 0 {
			o.Scope = idempotency.SingleTenant // only the field under test is wrong
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v: no panic", o)
				}
			}()
			idempotency.Middleware(c, o)
		}()
	}
	// The bounds themselves are accepted.
	idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, TTL: sentinel.MinTTL, Rerun: math.MaxInt32,
		Namespace: strings.Repeat("n", sentinel.MaxNamespaceLen)})
	idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, Namespace: "zahlungen-é\u0085"})
}

// Headers changed after WriteHeader are not part of the response, stored
// or live.
func TestHeadersAfterWriteHeaderIgnored(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Before", "1")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-After", "1")
	})
	for i := 0; i < 2; i++ {
		r := do(t, srv, "POST", "/x", "h", "")
		if r.status != 201 || r.header.Get("X-Before") != "1" || r.header.Get("X-After") != "" {
			t.Fatalf("attempt %d: %d %v", i, r.status, r.header)
		}
	}
}

// A handler written for any server flushes (asserting http.Flusher without
// a check, or through http.ResponseController): behind the middleware it
// neither panics nor gets ErrNotSupported, its response is stored whole
// and replayed, and a Flush before WriteHeader fixes the status at 200 as
// net/http does.
func TestHandlerFlushes(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "part one;")
		w.(http.Flusher).Flush()
		if err := http.NewResponseController(w).Flush(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "part two")
	})
	for i := 0; i < 2; i++ {
		r := do(t, srv, "POST", "/x", "flush-1", "")
		if r.err != nil || r.status != 200 || r.body != "part one;part two" || (i == 1) != (r.header.Get(idempotency.HeaderReplayed) == "true") {
			t.Fatalf("attempt %d: %v %d %q %v", i, r.err, r.status, r.body, r.header)
		}
	}
	srv = serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		w.WriteHeader(http.StatusCreated) // superfluous after a flush, as with net/http
	})
	if r := do(t, srv, "POST", "/x", "flush-2", ""); r.status != 200 {
		t.Fatalf("status %d after a flush, want 200", r.status)
	}
}

// MaxBodyBytes at its type's maximum (math.MaxInt64, "no limit of the
// middleware's own") overflowed the body read's bound (one byte more, to
// tell a body over the limit): the middleware read nothing, and the
// handler ran, and its response was stored, for an empty body.
func TestMaxBodyBytesAtItsMaximumKeepsTheBody(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, MaxBodyBytes: math.MaxInt64}, h.ServeHTTP)
	r := do(t, srv, "POST", "/charges", "k1", `{"amount":100}`)
	if r.status != 201 || !strings.Contains(r.body, `amount`) {
		t.Fatalf("%d %s: the handler did not get the request's body", r.status, r.body)
	}
	// Another body with the key is another request (422), not a replay of
	// an empty one.
	wantProblem(t, do(t, srv, "POST", "/charges", "k1", `{"amount":200}`), 422, idempotency.ProblemKeyReused)
}

// MaxResponseBytes at its type's maximum overflowed the size of its stored
// form, so Middleware's check against the client's MaxResultSize passed,
// and a response over MaxResultSize was found unstorable only after the
// handler ran. It panics at construction, as any size the client cannot
// store does.
func TestMaxResponseBytesAtItsMaximumPanicsAtConstruction(t *testing.T) {
	c := sentineltest.New(t)
	for _, n := range []int{math.MaxInt, math.MaxInt / 4 * 3, math.MaxInt/4*3 - 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("MaxResponseBytes %d: no panic", n)
				}
			}()
			idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, MaxResponseBytes: n})
		}()
	}
}
