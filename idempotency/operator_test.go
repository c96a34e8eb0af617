package idempotency_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Issue 25.5: a handler whose provider call timed out after the request
// was sent says "outcome unknown" with Uncertain: this request and every
// retry get the uncertain problem, the handler never runs again, the key
// is listed as uncertain and is resolved as usual. In both modes.
func TestUncertainFromHandler(t *testing.T) {
	for _, transactional := range []bool{false, true} {
		t.Run(fmt.Sprintf("transactional=%v", transactional), func(t *testing.T) {
			c := sentineltest.New(t)
			ctx := ctxT(t)
			if transactional {
				if _, err := sentineltest.Pool(t).Exec(ctx, "CREATE TABLE ledger (n int)"); err != nil {
					t.Fatal(err)
				}
			}
			var runs atomic.Int64
			srv := serve(t, c, idempotency.Options{Scope: accountOf, Transactional: transactional}, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if tx := idempotency.Tx(r.Context()); tx != nil {
					if _, err := tx.Exec(r.Context(), "INSERT INTO ledger VALUES (1)"); err != nil {
						t.Error(err)
					}
				}
				w.WriteHeader(http.StatusGatewayTimeout) // discarded
				idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			})
			for i := 0; i < 3; i++ {
				r := do(t, srv, "POST", "/charges", `"pay-1"`, `{"amount":500}`, "X-Account", "acct 42")
				wantProblem(t, r, 500, idempotency.ProblemUncertain)
				want := "sentinel idempotency inspect pay-1 --scope 'acct 42'"
				if !strings.Contains(r.problem.Detail, want) {
					t.Fatalf("the detail does not name %q: %s", want, r.problem.Detail)
				}
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times, want 1", n)
			}
			execs, _, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true})
			if err != nil || len(execs) != 1 || execs[0].Key != idempotency.ExecutionKey("acct 42", "pay-1") {
				t.Fatalf("uncertain keys: %+v %v", execs, err)
			}
			evs, err := c.History(ctx, execs[0].Key)
			if err != nil {
				t.Fatal(err)
			}
			// Uncertain's cause is recorded in the key's history, in
			// transactional mode too (it recorded only that the
			// transaction had been closed).
			if !strings.Contains(fmt.Sprint(evs[len(evs)-1].Metadata), "the card network timed out") {
				t.Fatalf("the history does not record the cause: %+v", evs[len(evs)-1])
			}
			if transactional {
				var n int
				if err := sentineltest.Pool(t).QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil || n != 0 {
					t.Fatalf("the handler's writes were committed: %d %v", n, err)
				}
			}
			// Resolved as usual: the retry gets the response.
			rec, err := idempotency.Inspect(ctx, c, "acct 42", "pay-1")
			if err != nil || !rec.Uncertain() {
				t.Fatalf("inspect: %+v %v", rec, err)
			}
			resp, err := idempotency.NewResponse(rec.Request.Fingerprint, 201, http.Header{"Content-Type": {"application/json"}}, []byte(`{"charge_id":"ch_1"}`))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := idempotency.Resolve(ctx, c, "acct 42", "pay-1", resp); err != nil {
				t.Fatal(err)
			}
			r := do(t, srv, "POST", "/charges", `"pay-1"`, `{"amount":500}`, "X-Account", "acct 42")
			if r.status != 201 || r.body != `{"charge_id":"ch_1"}` || r.header.Get(idempotency.HeaderReplayed) != "true" {
				t.Fatalf("after resolve: %d %s", r.status, r.body)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times, want 1", n)
			}
		})
	}
}

func accountOf(r *http.Request) string { return r.Header.Get("X-Account") }

// Issue 25.2: the uncertain problem names the command that inspects the
// key with --scope, -n and --schema when they are not the defaults, and
// nothing internal.
func TestUncertainProblemNamesRunnableCommand(t *testing.T) {
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{Namespace: "payments"}))
	srv := serve(t, c, idempotency.Options{Scope: accountOf}, func(w http.ResponseWriter, r *http.Request) {
		panic("charged, then fell over")
	})
	do(t, srv, "POST", "/charges", "k-1", "x", "X-Account", "cus_42")
	r := do(t, srv, "POST", "/charges", "k-1", "x", "X-Account", "cus_42")
	wantProblem(t, r, 500, idempotency.ProblemUncertain)
	want := "sentinel idempotency inspect k-1 --scope cus_42 -n payments --schema " + c.Config().Schema
	if !strings.Contains(r.problem.Detail, want) || strings.Contains(r.problem.Detail, idempotency.KeyPrefix) {
		t.Fatalf("detail %q, want it to carry %q and no execution key", r.problem.Detail, want)
	}
	if got := idempotency.Command("resolve --refused", "k 1", "", "default", "sentinel"); got != "sentinel idempotency resolve --refused 'k 1'" {
		t.Fatalf("Command with the defaults: %q", got)
	}
}

// Issue 25.7: an empty Idempotency-Key header is refused as empty, not
// as missing; a non-ASCII key is refused naming its character, not the
// character of its first byte.
func TestKeyTexts(t *testing.T) {
	c := sentineltest.New(t)
	h := &charge{}
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Required: true}, h.ServeHTTP)
	// An empty header on the wire (Go's client would send it too, curl
	// drops it), written by hand.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key:\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "header is empty") || !strings.Contains(string(body), idempotency.ProblemKeyInvalid) {
		t.Fatalf("empty header: %d %s", resp.StatusCode, body)
	}
	r := do(t, srv, "POST", "/charges", "", "")
	if !strings.Contains(r.problem.Detail, "has none") {
		t.Fatalf("missing header: %s", r.problem.Detail)
	}
	for key, want := range map[string]string{"café-1": "'é'", `"café"`: "'é'", "a\x01": `'\x01'`} {
		_, err := idempotency.ParseKey(key)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Ã") {
			t.Fatalf("ParseKey(%q): %v, want it to name %s", key, err, want)
		}
	}
	if _, err := idempotency.ParseKey("a\xff"); err == nil || !strings.Contains(err.Error(), "byte 0xff") {
		t.Fatalf("ParseKey of invalid UTF-8: %v", err)
	}
}

// Issue 25.6 at the library level: a response built from a Record is
// resolved at the Record's token, so it never completes a newer claim.
// (The race of two operators without --token is run through the binary:
// cmd/sentinel TestResolveRaceKeepsNewerClaim.)
func TestResolveActsOnTheClaimItRead(t *testing.T) {
	c := sentineltest.New(t)
	ctx := ctxT(t)
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		panic("charged, then fell over")
	})
	do(t, srv, "POST", "/charges", "pay-9", "x")
	older, err := idempotency.Inspect(ctx, c, "", "pay-9")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := idempotency.NewResponse(older.Request.Fingerprint, 201, nil, []byte("older"))
	if err != nil {
		t.Fatal(err)
	}
	// Meanwhile another operator resets the key and the same request
	// claims it again, and crashes again.
	execKey := idempotency.ExecutionKey("", "pay-9")
	rex, err := c.Reconcile(ctx, execKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ResetToClaimed(ctx, execKey, sentinel.WithToken(rex.Token)); err != nil {
		t.Fatal(err)
	}
	do(t, srv, "POST", "/charges", "pay-9", "x")
	newer, err := c.Inspect(ctx, execKey)
	if err != nil || newer.Token <= rex.Token {
		t.Fatalf("newer claim: %+v %v", newer, err)
	}
	// The first operator goes on with what it inspected.
	_, err = idempotency.Resolve(ctx, c, "", "pay-9", resp, sentinel.WithToken(older.Execution.Token))
	if !errors.Is(err, sentinel.ErrWrongState) {
		t.Fatalf("resolve of an older claim: %v", err)
	}
	now, err := c.Inspect(ctx, execKey)
	if err != nil || now.State != sentinel.StateExecuting || now.Token != newer.Token {
		t.Fatalf("the newer claim was touched: %+v %v", now, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("runs %d", runs.Load())
	}
	// The JSON a Content-Type promises is checked.
	if _, err := idempotency.NewResponse("sha256:00", 201, http.Header{"Content-Type": {"application/json"}}, []byte(`{"charge_id":"ch_1"`)); err == nil ||
		!strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("a broken JSON body: %v", err)
	}
}

// Uncertain under Options.Rerun: the handler's effect is deduplicated
// downstream by EffectKey, so a repeat of the same request runs it again
// (as after a crash) instead of waiting for an operator; the reference is
// the same on both attempts, and the provider charges once.
func TestUncertainWithRerunRunsTheRepeat(t *testing.T) {
	c := sentineltest.New(t)
	network := map[string]int{} // charges by reference
	var refs []string
	var runs atomic.Int64
	srv := serve(t, c, idempotency.Options{Scope: accountOf, Rerun: 3}, func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		ref := sentinel.EffectKey(r.Context())
		refs = append(refs, ref)
		network[ref]++
		if sentinel.Attempt(r.Context()) == 1 {
			idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q}`, ref)
	})
	first := do(t, srv, "POST", "/charges", `"pay-2"`, `{"amount":500}`, "X-Account", "acct 42")
	// This request gets the problem that says "repeat it", not the one
	// that sends the client to an operator.
	wantProblem(t, first, http.StatusServiceUnavailable, idempotency.ProblemRerun)
	second := do(t, srv, "POST", "/charges", `"pay-2"`, `{"amount":500}`, "X-Account", "acct 42")
	if second.status != http.StatusCreated {
		t.Fatalf("the repeat got %d, want 201 from a re-run: %s", second.status, second.body)
	}
	if n := runs.Load(); n != 2 || len(network) != 1 || refs[0] != refs[1] {
		t.Fatalf("runs %d, references %v: want 2 runs with one reference", n, refs)
	}
	third := do(t, srv, "POST", "/charges", `"pay-2"`, `{"amount":500}`, "X-Account", "acct 42")
	if third.status != http.StatusCreated || third.header.Get("Idempotent-Replayed") != "true" || runs.Load() != 2 {
		t.Fatalf("the third request: %d %q, runs %d: want the stored 201 replayed", third.status, third.header.Get("Idempotent-Replayed"), runs.Load())
	}
	if execs, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true}); err != nil || len(execs) != 0 {
		t.Fatalf("uncertain keys left for an operator: %+v %v", execs, err)
	}
}

// NoEffect under Options.Rerun, in a re-run: the first attempt's outcome
// is unknown, so the key is not given back but left for the next re-run,
// which a retry makes while attempts are left. In the last attempt Rerun
// allows there is none: the key is uncertain, and this request gets the
// uncertain problem, as every retry does. It got the handler's unstored
// "try again" response, and its retry the 500 that sends it to an
// operator.
func TestNoEffectInTheLastRerunIsUncertain(t *testing.T) {
	for _, rerun := range []int{2, 3} {
		t.Run(fmt.Sprintf("rerun=%d", rerun), func(t *testing.T) {
			c := sentineltest.New(t)
			var runs atomic.Int64
			srv := serve(t, c, idempotency.Options{Scope: accountOf, Rerun: rerun}, func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				if sentinel.Attempt(r.Context()) == 1 {
					idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
					return
				}
				idempotency.NoEffect(w)
				http.Error(w, "card network unreachable: try again", http.StatusServiceUnavailable)
			})
			send := func() reply {
				return do(t, srv, "POST", "/charges", "pay-9", `{"amount":500}`, "X-Account", "acct_42")
			}
			wantProblem(t, send(), http.StatusServiceUnavailable, idempotency.ProblemRerun)
			for attempt := 2; attempt < rerun; attempt++ { // attempts left: the handler's response, and the retry runs it
				if r := send(); r.status != http.StatusServiceUnavailable || r.problem.Type != "" || !strings.Contains(r.body, "try again") {
					t.Fatalf("attempt %d: %d %s, want the handler's unstored 503", attempt, r.status, r.body)
				}
			}
			last := send()
			wantProblem(t, last, http.StatusInternalServerError, idempotency.ProblemUncertain)
			if !strings.Contains(last.problem.Detail, "sentinel idempotency inspect pay-9 --scope acct_42") {
				t.Fatalf("detail %q", last.problem.Detail)
			}
			wantProblem(t, send(), http.StatusInternalServerError, idempotency.ProblemUncertain)
			if n := runs.Load(); n != int64(rerun) {
				t.Fatalf("the handler ran %d times, want %d", n, rerun)
			}
			if execs, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true}); err != nil || len(execs) != 1 {
				t.Fatalf("uncertain keys: %+v %v, want the one", execs, err)
			}
		})
	}
}

// Resolve of an uncertain key writes twice: it reconciles the key, then
// force-completes it. A response the client cannot store (over its
// MaxResultSize) was refused by the second write only: the key was left
// reconciling, nothing resolved, and every repeat of the request got 503
// "being reconciled" instead of the uncertain problem. It is refused before
// anything is written.
func TestResolveRefusesAnOversizedResponseBeforeReconciling(t *testing.T) {
	c := sentineltest.New(t, sentineltest.WithConfig(sentinel.Config{MaxResultSize: 128 << 10}))
	ctx := ctxT(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, MaxResponseBytes: 32 << 10}, func(w http.ResponseWriter, r *http.Request) {
		idempotency.Uncertain(w, errors.New("the card network timed out after the charge was sent"))
	})
	wantProblem(t, do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`), 500, idempotency.ProblemUncertain)
	rec, err := idempotency.Inspect(ctx, c, "", "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := idempotency.NewResponse(rec.Request.Fingerprint, 201, nil, []byte(strings.Repeat("x", 256<<10)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := idempotency.Resolve(ctx, c, "", "pay-1", resp); !errors.Is(err, sentinel.ErrInvalid) {
		t.Fatalf("Resolve with a response over MaxResultSize: %v, want ErrInvalid", err)
	}
	ex, err := c.Inspect(ctx, idempotency.ExecutionKey("", "pay-1"))
	if err != nil {
		t.Fatal(err)
	}
	if ex.State != sentinel.StateExecuting || ex.Token != rec.Execution.Token {
		t.Fatalf("the refused Resolve left the key %s at token %d (was executing at %d)", ex.State, ex.Token, rec.Execution.Token)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "pay-1", `{"amount":500}`), 500, idempotency.ProblemUncertain)
}

// While an operator reconciles a key, a request with the key but another
// body is not a retry of the reconciled request: it gets 422, as it does
// while the key is uncertain and after it is resolved; it was told to
// retry later (503), and found the key reused only after the resolve.
func TestReconcilingKeyRefusesAnotherRequest(t *testing.T) {
	c := sentineltest.New(t)
	ctx := ctxT(t)
	srv := serve(t, c, idempotency.Options{Scope: accountOf}, func(w http.ResponseWriter, r *http.Request) {
		idempotency.Uncertain(w, errors.New("the card network timed out"))
	})
	wantProblem(t, do(t, srv, "POST", "/charges", "k-9", `{"amount":500}`, "X-Account", "cus_42"), 500, idempotency.ProblemUncertain)
	wantProblem(t, do(t, srv, "POST", "/charges", "k-9", `{"amount":900}`, "X-Account", "cus_42"), 422, idempotency.ProblemKeyReused)
	if _, err := c.Reconcile(ctx, idempotency.ExecutionKey("cus_42", "k-9")); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, do(t, srv, "POST", "/charges", "k-9", `{"amount":500}`, "X-Account", "cus_42"), 503, idempotency.ProblemReconciling)
	r := do(t, srv, "POST", "/charges", "k-9", `{"amount":900}`, "X-Account", "cus_42")
	wantProblem(t, r, 422, idempotency.ProblemKeyReused)
	if r.problem.State != string(sentinel.StateReconciling) {
		t.Fatalf("the 422 does not say the first request's outcome is still open: %+v", r.problem)
	}
}
