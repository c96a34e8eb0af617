package idempotency_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Issue 26.6: header names compare as HTTP compares them. A handler that
// sets its credentials under names that are not in canonical form
// (w.Header()["set-cookie"]) sends them on the first response only: they
// are neither stored nor replayed.
func TestCredentialsUnderAnyCaseNeverStoredOrReplayed(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["set-cookie"] = []string{"session=secret-of-a; HttpOnly"}
		h["SET-COOKIE2"] = []string{"legacy=secret"}
		h["authentication-info"] = []string{`nextnonce="secret"`}
		h["authorization"] = []string{"Bearer secret"}
		h["proxy-Authorization"] = []string{"Basic secret"}
		h["Proxy-authentication-info"] = []string{`nextnonce="secret"`}
		h["x-request-note"] = []string{"kept"}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "ok")
	})
	first := do(t, srv, "POST", "/charges", "k", "x")
	if first.status != 201 || first.header.Get("Set-Cookie") == "" {
		t.Fatalf("the first response must carry its own cookie: %+v", first)
	}
	again := do(t, srv, "POST", "/charges", "k", "x")
	if again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" || again.body != "ok" ||
		again.header.Get("X-Request-Note") != "kept" {
		t.Fatalf("replay: %+v", again)
	}
	for k, v := range again.header {
		if strings.Contains(strings.Join(v, " "), "secret") {
			t.Errorf("the replay carries %s: %q", k, v)
		}
	}
	var leaked bool
	if err := c.Pool().QueryRow(ctxT(t), "SELECT bool_or(position('secret' in convert_from(result, 'UTF8')) > 0) FROM executions").Scan(&leaked); err != nil || leaked {
		t.Fatalf("a credential was stored (%v)", err)
	}

	// A record stored before names were compared in any case: the replay
	// drops its credentials all the same.
	var fp string
	if err := c.Pool().QueryRow(ctxT(t), "SELECT to_json(convert_from(result, 'UTF8')::json->>'fingerprint')::text FROM executions").Scan(&fp); err != nil {
		t.Fatal(err)
	}
	old := `{"fingerprint":` + fp + `,"status":201,"header":{"set-cookie":["session=stored-secret"],"X-Request-Note":["kept"]},"body":"b2s="}`
	if _, err := c.Pool().Exec(ctxT(t), "UPDATE executions SET result = convert_to($1, 'UTF8')", old); err != nil {
		t.Fatal(err)
	}
	again = do(t, srv, "POST", "/charges", "k", "x")
	if again.status != 201 || again.header.Get(idempotency.HeaderReplayed) != "true" || again.header.Get("X-Request-Note") != "kept" {
		t.Fatalf("replay of an old record: %+v", again)
	}
	if v := again.header.Values("Set-Cookie"); len(v) != 0 {
		t.Fatalf("the replay of an old record carries Set-Cookie %q", v)
	}
}

// StoredHeader, NewResponse (what resolve --header and the console's
// form store) and Resolve drop a credential or per-connection header
// under any case, and keep the rest under its canonical name.
func TestStoredHeaderComparesNamesInAnyCase(t *testing.T) {
	h := http.Header{
		"authorization":       {"Bearer secret"},
		"set-cookie":          {"s=secret"},
		"SET-COOKIE2":         {"s=secret"},
		"proxy-authorization": {"Basic secret"},
		"transfer-encoding":   {"chunked"},
		"content-length":      {"2"},
		"date":                {"Mon, 01 Jan 2024 00:00:00 GMT"},
		"x-trace":             {"a"},
		"X-Trace":             {"b"},
		"location":            {"/charges/1"},
	}
	got := idempotency.StoredHeader(h)
	want := http.Header{"X-Trace": {"b", "a"}, "Location": {"/charges/1"}}
	if len(got) != len(want) || got.Get("Location") != "/charges/1" || strings.Join(got["X-Trace"], ",") != "b,a" {
		t.Fatalf("StoredHeader = %v, want %v", got, want)
	}
	resp, err := idempotency.NewResponse("sha256:x", 201, http.Header{"set-cookie": {"s=secret"}, "authorization": {"x"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header != nil {
		t.Fatalf("NewResponse kept %v", resp.Header)
	}
}

// A handler's trailer fields (declared in its Trailer header, or set with
// http.TrailerPrefix) reach the client as they do without the middleware,
// on the first response and on every replay; they were dropped from both.
func TestTrailersSentAndReplayed(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "data")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	for i, replayed := range []string{"", "true"} {
		req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/upload", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idempotency.HeaderKey, "t-1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 201 || string(b) != "data" || resp.Header.Get(idempotency.HeaderReplayed) != replayed {
			t.Fatalf("response %d: %d %q %v", i, resp.StatusCode, b, resp.Header)
		}
		if got := resp.Trailer.Get("X-Checksum") + " " + resp.Trailer.Get("X-Late"); got != "abc late" {
			t.Fatalf("response %d (replayed %q): trailers %v, want X-Checksum abc and X-Late late", i, replayed, resp.Trailer)
		}
	}
}

// A status net/http sends (up to 999) is stored and replayed as the client
// got it; a 799 was stored, then refused as unreplayable: the request that
// ran the handler and every repeat got 500 ProblemUnreplayable. A status
// net/http refuses (1000) panics as it does there, leaving the key
// uncertain, instead of completing it with a response nobody can get.
func TestUnusualStatusReplayed(t *testing.T) {
	c := sentineltest.New(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		code := 799
		if r.URL.Path == "/invalid" {
			code = 1000
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "odd")
	})
	for _, replayed := range []string{"", "true"} {
		r := do(t, srv, "POST", "/odd", "s-1", "x")
		if r.status != 799 || r.body != "odd" || r.header.Get(idempotency.HeaderReplayed) != replayed {
			t.Fatalf("got %d %q (replayed %q), want 799 odd (replayed %q)", r.status, r.body, r.header.Get(idempotency.HeaderReplayed), replayed)
		}
	}
	do(t, srv, "POST", "/invalid", "s-2", "x")
	wantProblem(t, do(t, srv, "POST", "/invalid", "s-2", "x"), 500, idempotency.ProblemUncertain)
}

// What the developer's handler does behind the middleware works as it
// does without it: a deadline set with http.ResponseController ("feature
// not supported" before), a body written to a 204 (refused with
// http.ErrBodyNotAllowed, as net/http does; it was stored and shown by
// inspect, never sent), and the request recorded with its query (the
// fingerprint covers it; inspect showed the path alone).
func TestHandlerSeesTheServersWriter(t *testing.T) {
	c := sentineltest.New(t)
	var deadlineErr, bodyErr error
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		deadlineErr = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
		w.WriteHeader(http.StatusNoContent)
		_, bodyErr = io.WriteString(w, "x")
	})
	r := do(t, srv, "POST", "/charges?mode=card", "k-1", "{}")
	if r.err != nil || r.status != http.StatusNoContent {
		t.Fatalf("first: %+v", r)
	}
	if deadlineErr != nil {
		t.Errorf("SetWriteDeadline behind the middleware: %v", deadlineErr)
	}
	if !errors.Is(bodyErr, http.ErrBodyNotAllowed) {
		t.Errorf("Write after 204: %v, want http.ErrBodyNotAllowed", bodyErr)
	}
	rec, err := idempotency.Inspect(ctxT(t), c, "", "k-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Response == nil || len(rec.Response.Body) != 0 {
		t.Errorf("stored response %+v, want a 204 without a body", rec.Response)
	}
	if rec.Request.Path != "/charges?mode=card" {
		t.Errorf("recorded path %q, want the path and query", rec.Request.Path)
	}
}
