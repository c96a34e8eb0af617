package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// chargeServer is a POST /charges endpoint behind the idempotency
// middleware, on a real HTTP server, scoped by X-Account. Its first run
// charges the card and then panics (the incident); later runs
// charge and answer 201.
type chargeServer struct {
	*httptest.Server
	charges atomic.Int64
}

func newChargeServer(e *env, ns string) *chargeServer {
	cs := &chargeServer{}
	c := e.newClient(ns)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cs.charges.Add(1) // the card is charged
		if n == 1 {
			panic("charged ch_1, then the process fell over")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge_id":"ch_%d"}`, n)
	})
	mw := idempotency.Middleware(c, idempotency.Options{Required: true,
		Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	cs.Server = httptest.NewUnstartedServer(mw(h))
	cs.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic is the point
	cs.Start()
	e.t.Cleanup(cs.Close)
	return cs
}

type httpReply struct {
	status  int
	header  http.Header
	body    string
	problem idempotency.Problem
	err     error
}

func (cs *chargeServer) post(t *testing.T, key, body string) httpReply {
	t.Helper()
	return postCharge(t, cs.Server, "acct_42", key, body)
}

// postCharge sends POST /charges with an Idempotency-Key for account (the
// X-Account header the test servers scope by).
func postCharge(t *testing.T, srv *httptest.Server, account, key, body string) httpReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/charges", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", account)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		return httpReply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := httpReply{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		require.NoError(t, json.Unmarshal(b, &r.problem))
	}
	return r
}

// Issue 18, end to end: a real HTTP server, the real binary, PostgreSQL.
// The handler charges and panics; the retry gets the uncertain problem;
// `sentinel idempotency inspect` shows the request; the generic
// force-complete refuses a bare value; `sentinel idempotency resolve`
// gives a response; the retry of the same request gets it, replayed; only
// a new key (the client's choice) charges again.
func TestIdempotencyResolveEndToEnd(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	const key, body = "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":4200,"currency":"eur"}`

	if r := srv.post(t, key, body); r.err == nil {
		t.Fatalf("the panicking request got a response: %+v", r)
	}
	r := srv.post(t, key, body)
	require.Equal(t, 500, r.status, r.body)
	require.Equal(t, idempotency.ProblemUncertain, r.problem.Type)
	require.NotContains(t, r.problem.Detail, "new key for")
	require.Contains(t, r.problem.Detail, "sentinel idempotency inspect "+key)

	// The operator finds it by the client's key.
	out := e.run("idempotency", "list", "--uncertain", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Regexp(t, `UNCERTAIN\s+payments\s+acct_42\s+`+key+`\s+POST\s+/charges\s`, out.stdout)

	out = e.run("idempotency", "inspect", key, "--scope", "acct_42", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "UNCERTAIN")
	require.Contains(t, out.stdout, "POST /charges")
	require.Contains(t, out.stdout, "sentinel idempotency resolve "+key+" --scope acct_42 -n payments --token ")
	out = e.run("idempotency", "inspect", key, "--scope", "acct_42", "-n", "payments", "--json")
	requireCode(t, out, exitOK)
	var rec idemRecordJSON
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &rec))
	require.True(t, rec.Uncertain)
	require.Equal(t, "POST", rec.Method)
	require.Equal(t, "/charges", rec.Path)
	require.True(t, strings.HasPrefix(rec.Fingerprint, "sha256:"), rec.Fingerprint)
	require.Equal(t, idempotency.ExecutionKey("acct_42", key), rec.ExecutionKey)
	token := strconv.FormatInt(rec.Token, 10)

	// The generic inspect sends the operator to the HTTP view.
	out = e.run("inspect", rec.ExecutionKey, "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "sentinel idempotency inspect "+key+" --scope acct_42 -n payments")
	require.NotContains(t, out.stdout, "force-complete")

	// Another scope's key of the same value is another key.
	requireCode(t, e.run("idempotency", "inspect", key, "--scope", "acct_43", "-n", "payments"), exitNotFound)
	// The key copied from the client's log, without its scope: not found,
	// and the operator is told the scope is missing and where to find it.
	out = e.run("idempotency", "inspect", key, "-n", "payments")
	requireCode(t, out, exitNotFound)
	require.Contains(t, out.stderr, "no --scope was given")
	require.Contains(t, out.stderr, "sentinel idempotency list")
	out = e.run("idempotency", "resolve", key, "-n", "payments", "--status", "201", "--body", "{}", "--yes")
	requireCode(t, out, exitNotFound)
	require.Contains(t, out.stderr, "no --scope was given")

	// Without -n (the default namespace): not found there, and where it is,
	// with the command, runnable as printed.
	out = e.run("idempotency", "inspect", key, "--scope", "acct_42")
	requireCode(t, out, exitNotFound)
	require.Contains(t, out.stderr, `"`+key+`" has an execution in namespace "payments"; the same command there:`)
	p := runPrinted(t, findCommand(t, out.stderr, "sentinel idempotency inspect"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "POST /charges")

	// Issue 18.3: the generic tools refuse a value the middleware could
	// not replay, and say what to use instead; nothing is written.
	out = e.run("reconcile", rec.ExecutionKey, "-n", "payments", "--token", token, "--yes")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "\n  sentinel idempotency resolve "+key+" --scope acct_42 -n payments --token ")
	require.NotContains(t, out.stdout, "force-complete")
	fc := e.run("force-complete", rec.ExecutionKey, `{"charge_id":"ch_1"}`, "-n", "payments", "--yes")
	requireCode(t, fc, exitUsage)
	require.Contains(t, fc.stderr, "sentinel idempotency resolve "+key+" --scope acct_42")
	sr := e.run("set-result", rec.ExecutionKey, `{"charge_id":"ch_1"}`, "-n", "payments", "--yes")
	requireCode(t, sr, exitUsage)
	require.Contains(t, sr.stderr, "sentinel idempotency resolve")
	out = e.run("idempotency", "inspect", key, "--scope", "acct_42", "-n", "payments", "--json")
	require.NoError(t, json.Unmarshal([]byte(out.stdout), &rec))
	require.Equal(t, "reconciling", string(rec.State), "a refused force-complete wrote something")

	// Bad input and a stale token write nothing.
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments", "--status", "99", "--body", "{}", "--yes"), exitUsage)
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments", "--body", "{}", "--yes"), exitUsage)
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments", "--refused", "--yes"), exitRefused)
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments", "--token", token,
		"--status", "201", "--body", `{"charge_id":"ch_1"}`, "--yes"), exitRefused) // reconciled since: token moved on
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments",
		"--status", "201", "--body", `{"charge_id":"ch_1"}`), exitRefused) // no --yes, no terminal
	requireCode(t, e.run("idempotency", "resolve", "no-such-key", "-n", "payments", "--status", "201", "--body", "{}", "--yes"), exitNotFound)
	r = srv.post(t, key, body)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "still reconciling: %s", r.body)

	// The card network shows ch_1: resolve with the response the client
	// should have had.
	out = e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments", "--token", strconv.FormatInt(rec.Token, 10),
		"--status", "201", "--body", `{"charge_id":"ch_1"}`, "--header", "Location: /charges/ch_1", "--header", "Set-Cookie: s=operator", "--yes")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "retries of POST /charges now get 201 Created")

	r = srv.post(t, key, body)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, `{"charge_id":"ch_1"}`, r.body)
	require.Equal(t, "true", r.header.Get("Idempotent-Replayed"))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, "/charges/ch_1", r.header.Get("Location"))
	require.Empty(t, r.header.Get("Set-Cookie"), "a credential header was stored")
	require.EqualValues(t, 1, srv.charges.Load(), "the retry charged again")

	// The same key with another body is still another request.
	r = srv.post(t, key, `{"amount":9900,"currency":"eur"}`)
	require.Equal(t, 422, r.status, r.body)

	out = e.run("idempotency", "inspect", key, "--scope", "acct_42", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "stored response:")
	require.Contains(t, out.stdout, `{"charge_id":"ch_1"}`)
	// Resolving twice is refused.
	requireCode(t, e.run("idempotency", "resolve", key, "--scope", "acct_42", "-n", "payments",
		"--status", "201", "--body", `{"charge_id":"ch_1"}`, "--yes"), exitRefused)

	// Only a new key, the client's choice, is a new charge.
	r = srv.post(t, "a-new-key", body)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	require.Equal(t, `{"charge_id":"ch_2"}`, r.body)
	require.EqualValues(t, 2, srv.charges.Load())

	out = e.run("idempotency", "list", "--uncertain", "-n", "payments")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "no Idempotency-Keys uncertain")

	// A path chosen by the client cannot drive the operator's terminal.
	req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/charges/%1b%5b2J", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "hostile-1")
	req.Header.Set("X-Account", "acct_42")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	out = e.run("idempotency", "inspect", "hostile-1", "--scope", "acct_42", "-n", "payments")
	requireCode(t, out, exitOK)
	require.NotContains(t, out.stdout, "\x1b")
	require.Contains(t, out.stdout, `POST /charges/\x1b[2J`)
}

// resolve --refused: the handler finished but lost its lease before its
// response was stored; inspect shows that response, and resolve --refused
// sends it to the client's retries.
func TestIdempotencyResolveRefused(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	c := e.newClient("default")
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		started := time.Now() // after the claim: its hard TTL ends before started+1s
		<-r.Context().Done()  // the lease is lost (at the hard TTL, or earlier on a loaded machine)
		// Answer only once the hard TTL has certainly passed on the
		// database clock too, so the completion is refused.
		time.Sleep(time.Until(started.Add(time.Second + 300*time.Millisecond)))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=secret")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"charge_id":"ch_late"}`)
	})
	mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, TTL: time.Second, HardTTL: time.Second})
	srv := httptest.NewServer(mw(h))
	t.Cleanup(srv.Close)
	post := func() (*http.Response, string) {
		req, err := http.NewRequestWithContext(ctxT(t), "POST", srv.URL+"/charges", strings.NewReader("x"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "late-1")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	// The request that ran the handler gets its answer as written (the
	// middleware holds it), though the completion was refused: its key
	// is uncertain until an operator resolves it.
	resp, body := post()
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, `{"charge_id":"ch_late"}`, body)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
	// Callers turned away since (Config.RecordRejections) do not hide the
	// refused response: inspect reads the key's last run.
	e.rejectMany(300)

	out := e.run("idempotency", "inspect", "late-1")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, "refused response")
	require.Contains(t, out.stdout, `{"charge_id":"ch_late"}`)
	require.NotContains(t, out.stdout, "secret", "a credential was recorded")
	require.Contains(t, out.stdout, "sentinel idempotency resolve late-1 --refused --token ")

	out = e.run("idempotency", "resolve", "late-1", "--refused", "--yes")
	requireCode(t, out, exitOK)
	resp, body = post()
	require.Equal(t, http.StatusCreated, resp.StatusCode, body)
	require.Equal(t, `{"charge_id":"ch_late"}`, body)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.Empty(t, resp.Header.Get("Set-Cookie"))
	require.EqualValues(t, 1, runs.Load())
}

// A --header resolve could never store (a name that is not an HTTP token,
// a value with a control character) passed the command line's check and
// was refused by the library once the key had been read: exit 4, "refused
// or wrong state", where resolve's help promises exit 2 for bad input.
// It is refused with the command line now, exit 2, before the connection.
func TestIdempotencyResolveBadHeaderIsUsage(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "default")
	const crashed = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	srv.post(t, crashed, `{"amount":4200}`) // the handler panics: uncertain
	for _, h := range []string{"X(y): v", "X-A: a\x01b"} {
		r := e.run("idempotency", "resolve", crashed, "--scope", "acct_42", "--status", "201", "--body", "{}", "--header", h, "--yes")
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "--header")
		require.NotContains(t, r.stderr, "database ", "refused before the connection")
	}
	out := e.run("idempotency", "inspect", crashed, "--scope", "acct_42", "--json")
	requireCode(t, out, exitOK)
	require.Contains(t, out.stdout, `"uncertain": true`, "nothing was written")
}
