package idempotency_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Issue 18.6: Scope is a decision. No Scope panics at start-up naming
// SingleTenant; a request without a principal is refused before the
// handler runs.
func TestScopeRequired(t *testing.T) {
	c := sentineltest.New(t)
	func() {
		defer func() {
			msg := fmt.Sprint(recover())
			if !strings.Contains(msg, "idempotency.SingleTenant") {
				t.Fatalf("Middleware without Scope: panic %q, want one naming idempotency.SingleTenant", msg)
			}
		}()
		idempotency.Middleware(c, idempotency.Options{Required: true})
	}()

	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }}, h.ServeHTTP)
	r := do(t, srv, "POST", "/charges", "k1", "x") // no X-Account: no principal
	wantProblem(t, r, http.StatusForbidden, idempotency.ProblemNoScope)
	if h.runs.Load() != 0 {
		t.Fatalf("the handler ran %d times for a request without a principal", h.runs.Load())
	}
	var n int
	if err := c.Pool().QueryRow(ctxT(t), "SELECT count(*) FROM executions").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d executions written for a refused request (%v)", n, err)
	}
	// With a principal the same key works, and is stored under its scope.
	if r := do(t, srv, "POST", "/charges", "k1", "x", "X-Account", "acct_a"); r.status != 201 {
		t.Fatalf("with a principal: %+v", r)
	}
	if got, want := onlyExecution(t, c), idempotency.ExecutionKey("acct_a", "k1"); got != want {
		t.Fatalf("stored under %q, want %q", got, want)
	}
}

// SingleTenant keys keep the name unscoped keys had before Scope was
// required, so requests in flight across the upgrade keep their keys.
func TestSingleTenantKeepsUnscopedName(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, h.ServeHTTP)
	if r := do(t, srv, "POST", "/charges", "k1", "x"); r.status != 201 {
		t.Fatalf("%+v", r)
	}
	if got := onlyExecution(t, c); got != "idempotency:0::k1" {
		t.Fatalf("SingleTenant key stored as %q, want idempotency:0::k1", got)
	}
}

func TestExecutionKeyRoundTrip(t *testing.T) {
	for _, tc := range [][2]string{{"", "k"}, {"acct:1", "a:b"}, {"x", "12:y:z"}, {"", "0::k"}} {
		s, k, ok := idempotency.ParseExecutionKey(idempotency.ExecutionKey(tc[0], tc[1]))
		if !ok || s != tc[0] || k != tc[1] {
			t.Errorf("%q/%q: got %q/%q %v", tc[0], tc[1], s, k, ok)
		}
	}
	for _, bad := range []string{"order-1", "idempotency:", "idempotency:x:a:b", "idempotency:5:ab:c", "idempotency:01:a:b", "idempotency:-1:a"} {
		if _, _, ok := idempotency.ParseExecutionKey(bad); ok {
			t.Errorf("%q parsed as a middleware key", bad)
		}
	}
}

// Issue 18.7: credentials are never stored nor replayed. The first
// response carries the handler's cookie; the replay and the stored record
// do not.
func TestCredentialsNeverStoredOrReplayed(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Set-Cookie", "session=secret-of-a; HttpOnly")
		h.Set("Set-Cookie2", "legacy=secret")
		h.Set("Authentication-Info", `nextnonce="secret"`)
		h.Set("Authorization", "Bearer secret")
		h.Set("Proxy-Authorization", "Basic secret")
		h.Set("Proxy-Authentication-Info", `nextnonce="secret"`)
		h.Set("Location", "/charges/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	})
	first := do(t, srv, "POST", "/charges", "k", "x")
	if first.status != 201 || first.header.Get("Set-Cookie") == "" {
		t.Fatalf("the first response must carry its own cookie: %+v", first)
	}
	again := do(t, srv, "POST", "/charges", "k", "x")
	if again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" || again.header.Get("Location") != "/charges/1" || again.body != "ok" {
		t.Fatalf("replay: %+v", again)
	}
	for _, k := range []string{"Set-Cookie", "Set-Cookie2", "Authentication-Info", "Authorization", "Proxy-Authorization", "Proxy-Authentication-Info"} {
		if v := again.header.Get(k); v != "" {
			t.Errorf("the replay carries %s: %q", k, v)
		}
	}
	var stored string
	if err := c.Pool().QueryRow(ctxT(t), "SELECT convert_from(result, 'UTF8') FROM executions").Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "secret") {
		t.Fatalf("a credential was stored: %s", stored)
	}
}

// Issue 18.8: NoEffect sends one response without storing it and gives
// the key back; by default a 5xx is stored and replayed.
func TestNoEffectGivesTheKeyBack(t *testing.T) {
	for _, tx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", tx), func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			handler := func(noEffect bool) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					if runs.Add(1) == 1 {
						if noEffect && !idempotency.NoEffect(w) {
							t.Error("NoEffect did not find the middleware's writer")
						}
						http.Error(w, "card network unreachable", http.StatusBadGateway)
						return
					}
					w.WriteHeader(http.StatusCreated)
				}
			}
			// Transactional mode does not store a 5xx by default; Store
			// true for all makes the default the same in both modes, so
			// that only NoEffect differs.
			all := func(int) bool { return true }
			srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: tx, Store: all}, handler(true))
			if r := do(t, srv, "POST", "/charges", "k", "x"); r.status != http.StatusBadGateway {
				t.Fatalf("first: %+v", r)
			}
			r := do(t, srv, "POST", "/charges", "k", "x")
			if r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "" || runs.Load() != 2 {
				t.Fatalf("retry after NoEffect: %+v, runs %d; want the handler run again", r, runs.Load())
			}

			// Without NoEffect, the same 502 is stored and replayed.
			runs.Store(0)
			srv = serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: tx, Store: all}, handler(false))
			do(t, srv, "POST", "/charges", "k2", "x")
			r = do(t, srv, "POST", "/charges", "k2", "x")
			if r.status != http.StatusBadGateway || r.header.Get(idempotency.HeaderReplayed) != "true" || runs.Load() != 1 {
				t.Fatalf("default: %+v, runs %d; want the 502 replayed", r, runs.Load())
			}
		})
	}
}

func TestNoEffectOutsideMiddleware(t *testing.T) {
	if idempotency.NoEffect(nil) {
		t.Fatal("NoEffect(nil) reported true")
	}
	var w http.ResponseWriter = struct{ http.ResponseWriter }{}
	if idempotency.NoEffect(w) {
		t.Fatal("NoEffect on a foreign writer reported true")
	}
}

// Issue 18.9: with CanonicalJSON, the same JSON written differently is the
// same request; without it, or for a body that is not JSON, bytes count.
func TestCanonicalJSONFingerprint(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	canon := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, CanonicalJSON: true, Namespace: "canon"}, h.ServeHTTP)
	exact := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Namespace: "exact"}, h.ServeHTTP)
	jsonCT := []string{"Content-Type", "application/json; charset=utf-8"}
	a := `{"amount":4200,"currency":"eur","meta":{"x":[1,2.50]}}`
	b := "{ \"currency\" : \"eur\",\n  \"amount\": 4200, \"meta\": {\"x\": [1, 2.50]} }"
	changed := `{"amount":4201,"currency":"eur","meta":{"x":[1,2.50]}}`
	numberText := `{"amount":4200.0,"currency":"eur","meta":{"x":[1,2.50]}}`

	first := do(t, canon, "POST", "/charges", "k", a, jsonCT...)
	r := do(t, canon, "POST", "/charges", "k", b, jsonCT...)
	if r.status != 201 || r.header.Get(idempotency.HeaderReplayed) != "true" || r.body != first.body {
		t.Fatalf("canonical: same JSON with other whitespace and order: %+v", r)
	}
	wantProblem(t, do(t, canon, "POST", "/charges", "k", changed, jsonCT...), 422, idempotency.ProblemKeyReused)
	wantProblem(t, do(t, canon, "POST", "/charges", "k", numberText, jsonCT...), 422, idempotency.ProblemKeyReused)
	// Not declared JSON: byte for byte.
	do(t, canon, "POST", "/charges", "t", a, "Content-Type", "text/plain")
	wantProblem(t, do(t, canon, "POST", "/charges", "t", b, "Content-Type", "text/plain"), 422, idempotency.ProblemKeyReused)
	// Invalid JSON: byte for byte, no error.
	do(t, canon, "POST", "/charges", "bad", `{"a":`, jsonCT...)
	if r := do(t, canon, "POST", "/charges", "bad", `{"a":`, jsonCT...); r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("invalid JSON repeat: %+v", r)
	}
	// Off by default.
	do(t, exact, "POST", "/charges", "k", a, jsonCT...)
	wantProblem(t, do(t, exact, "POST", "/charges", "k", b, jsonCT...), 422, idempotency.ProblemKeyReused)
}

// Issue 18.4: the incident. An operator completed an HTTP key
// with a value that is not a response (here written behind every tool's
// back); the retry is told what happened and never to use a new key, and
// the handler does not run.
func TestUnreplayableRecordIsNotAKeyReuse(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		panic("charged ch_97ea3056, then crashed")
	})
	do(t, srv, "POST", "/charges", "pay-1", `{"amount":4200}`)
	r := do(t, srv, "POST", "/charges", "pay-1", `{"amount":4200}`)
	wantProblem(t, r, 500, idempotency.ProblemUncertain)
	if strings.Contains(r.problem.Detail, "use a new key") || !strings.Contains(r.problem.Detail, "sentinel idempotency inspect pay-1") {
		t.Fatalf("uncertain problem: %q", r.problem.Detail)
	}
	// The same key with another body while the outcome is unknown: 422,
	// but no advice to use a new key (it may be a botched retry).
	r = do(t, srv, "POST", "/charges", "pay-1", `{"amount": 4200}`)
	wantProblem(t, r, 422, idempotency.ProblemKeyReused)
	if strings.Contains(r.problem.Detail, "use a new key") || r.problem.State != "executing" {
		t.Fatalf("422 while the outcome is unknown: %+v", r.problem)
	}
	execKey := idempotency.ExecutionKey("", "pay-1")
	if _, err := c.Reconcile(ctxT(t), execKey); err != nil {
		t.Fatal(err)
	}
	// What the operator stored: a bare domain value.
	if _, err := c.Pool().Exec(ctxT(t), `UPDATE executions SET state = 'completed', result = $1, completed_at = now(), lease_expires_at = NULL WHERE key = $2`,
		[]byte(`{"charge_id":"ch_97ea3056"}`), execKey); err != nil {
		t.Fatal(err)
	}
	r = do(t, srv, "POST", "/charges", "pay-1", `{"amount":4200}`)
	wantProblem(t, r, 500, idempotency.ProblemUnreplayable)
	for _, bad := range []string{"different request", "use a new key"} {
		if strings.Contains(r.problem.Detail, bad) {
			t.Fatalf("problem says %q: %s", bad, r.problem.Detail)
		}
	}
	if !strings.Contains(r.problem.Detail, "do not repeat it with another key") || runs.Load() != 1 {
		t.Fatalf("problem %q, runs %d", r.problem.Detail, runs.Load())
	}
}

// Inspect and Resolve (the library behind `sentinel idempotency`): the
// operator's response, with the request's fingerprint, is what the
// client's retry of the same request gets.
func TestResolveUncertainWithResponse(t *testing.T) {
	c := sentineltest.New(t)
	var runs atomic.Int64
	scope := func(r *http.Request) string { return r.Header.Get("X-Account") }
	srv := serve(t, c, idempotency.Options{Scope: scope}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		panic("crashed after charging")
	})
	acct := []string{"X-Account", "acct_7", "Content-Type", "application/json"}
	do(t, srv, "POST", "/charges?x=1", "pay-2", `{"amount":4200}`, acct...)

	rec, err := idempotency.Inspect(ctxT(t), c, "acct_7", "pay-2")
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Uncertain() || rec.Request.Method != "POST" || rec.Request.Path != "/charges?x=1" || rec.Request.Fingerprint == "" || rec.Response != nil {
		t.Fatalf("record: %+v", rec)
	}
	resp, err := idempotency.NewResponse(rec.Request.Fingerprint, 201,
		http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"s=1"}}, []byte(`{"charge_id":"ch_97ea3056"}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Set-Cookie") != "" {
		t.Fatal("NewResponse kept Set-Cookie")
	}
	// A stale token is refused and writes nothing.
	if _, err := idempotency.Resolve(ctxT(t), c, "acct_7", "pay-2", resp, sentinel.WithToken(rec.Execution.Token+5)); err == nil {
		t.Fatal("Resolve with a stale token succeeded")
	}
	if _, err := idempotency.Resolve(ctxT(t), c, "acct_7", "pay-2", resp, sentinel.WithToken(rec.Execution.Token)); err != nil {
		t.Fatal(err)
	}
	r := do(t, srv, "POST", "/charges?x=1", "pay-2", `{"amount":4200}`, acct...)
	if r.status != 201 || r.header.Get(idempotency.HeaderReplayed) != "true" || r.body != `{"charge_id":"ch_97ea3056"}` ||
		r.header.Get("Content-Type") != "application/json" || runs.Load() != 1 {
		t.Fatalf("retry after resolve: %+v, runs %d", r, runs.Load())
	}
	// Another principal's same key is another key.
	if _, err := idempotency.Inspect(ctxT(t), c, "acct_8", "pay-2"); err == nil {
		t.Fatal("acct_8 sees acct_7's key")
	}
	// A different request with the key is still refused.
	wantProblem(t, do(t, srv, "POST", "/charges?x=1", "pay-2", `{"amount":9900}`, acct...), 422, idempotency.ProblemKeyReused)
	rec, err = idempotency.Inspect(ctxT(t), c, "acct_7", "pay-2")
	if err != nil || rec.Response == nil || rec.Response.Status != 201 {
		t.Fatalf("after resolve: %+v %v", rec, err)
	}
	// Completed keys cannot be resolved again.
	if _, err := idempotency.Resolve(ctxT(t), c, "acct_7", "pay-2", resp); err == nil {
		t.Fatal("Resolve of a completed key succeeded")
	}
}

func TestCheckResult(t *testing.T) {
	good, _ := json.Marshal(idempotency.Response{Fingerprint: "sha256:00", Status: 201, Body: []byte("ok")})
	if err := idempotency.CheckResult("order-1", []byte(`{"x":1}`)); err != nil {
		t.Fatalf("a key of another kind: %v", err)
	}
	if err := idempotency.CheckResult(idempotency.ExecutionKey("a", "k"), good); err != nil {
		t.Fatalf("a response: %v", err)
	}
	for _, bad := range []string{`{"charge_id":"ch_1"}`, `null`, `"ok"`, `{"fingerprint":"sha256:00","status":42}`, `{"status":201}`} {
		err := idempotency.CheckResult(idempotency.ExecutionKey("a", "k"), []byte(bad))
		if err == nil || !strings.Contains(err.Error(), `Idempotency-Key "k" of scope "a"`) || !strings.Contains(err.Error(), "sentinel idempotency resolve --help") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// Issue 18.3 at the library level: with package idempotency linked in,
// sentinel.Client.ForceComplete and SetResult refuse, for its keys, a value
// the middleware could not replay, and write nothing.
func TestForceCompleteRefusesUnreplayableValue(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		panic("crashed after charging")
	})
	do(t, srv, "POST", "/charges", "pay-3", "x")
	execKey := idempotency.ExecutionKey("", "pay-3")
	ex, err := c.Reconcile(ctxT(t), execKey)
	if err != nil {
		t.Fatal(err)
	}
	err = c.ForceComplete(ctxT(t), execKey, map[string]string{"charge_id": "ch_1"}, sentinel.WithToken(ex.Token))
	if !errors.Is(err, sentinel.ErrInvalid) || !strings.Contains(err.Error(), `Idempotency-Key "pay-3"`) {
		t.Fatalf("ForceComplete of a bare value: %v", err)
	}
	if got, _ := c.Inspect(ctxT(t), execKey); got.State != sentinel.StateReconciling {
		t.Fatalf("state %s after a refused ForceComplete", got.State)
	}
	// Keys of other kinds are not concerned.
	if err := c.ForceComplete(ctxT(t), "order-1", 42); !errors.Is(err, sentinel.ErrNotFound) {
		t.Fatalf("ForceComplete of another key: %v", err)
	}
}

// Resolve refuses a response built for another request: the retries would
// get 422.
func TestResolveRefusesAnotherFingerprint(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		panic("crashed")
	})
	do(t, srv, "POST", "/charges", "pay-4", "x")
	resp, err := idempotency.NewResponse("sha256:not-this-request", 201, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Resolve(ctxT(t), c, "", "pay-4", resp); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("Resolve with another request's fingerprint: %v", err)
	}
	if ex, _ := c.Inspect(ctxT(t), idempotency.ExecutionKey("", "pay-4")); ex.State != sentinel.StateExecuting {
		t.Fatalf("state %s: a refused Resolve wrote something", ex.State)
	}
}

// ExecutionKey and ParseExecutionKey are inverse: no two scope/key pairs
// share an execution key, and every parsed key names its own pair.
func FuzzExecutionKey(f *testing.F) {
	f.Add("", "k")
	f.Add("acct:1", "a:b")
	f.Add("3:x", "y")
	f.Fuzz(func(t *testing.T, scope, key string) {
		if key == "" {
			t.Skip("the middleware never has an empty key (ParseKey refuses it)")
		}
		s, k, ok := idempotency.ParseExecutionKey(idempotency.ExecutionKey(scope, key))
		if !ok || s != scope || k != key {
			t.Fatalf("%q/%q: parsed back as %q/%q %v", scope, key, s, k, ok)
		}
		raw := scope + key
		if s, k, ok := idempotency.ParseExecutionKey(raw); ok && idempotency.ExecutionKey(s, k) != raw {
			t.Fatalf("%q parsed as %q/%q, which names %q", raw, s, k, idempotency.ExecutionKey(s, k))
		}
	})
}
