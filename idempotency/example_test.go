package idempotency_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// exampleTB lets the examples borrow sentineltest outside a test function.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (e *exampleTB) Helper()                   {}
func (e *exampleTB) Cleanup(f func())          { e.cleanups = append(e.cleanups, f) }
func (e *exampleTB) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (e *exampleTB) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (e *exampleTB) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// exampleClient returns a migrated client in a schema of its own.
func exampleClient() (*sentinel.Client, func()) {
	tb := &exampleTB{}
	return sentineltest.New(tb), tb.done
}

func post(url, key, body string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acct_42") // the principal, for ExampleMiddleware's Scope
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
}

// A charge endpoint behind the middleware: the retry gets the stored
// response, the card is charged once, and a different request reusing the
// key is refused.
func ExampleMiddleware() {
	client, done := exampleClient()
	defer done()

	charges := 0
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d"}`, charges)
	})
	mw := idempotency.Middleware(client, idempotency.Options{
		Required: true,
		Scope:    func(r *http.Request) string { return r.Header.Get("X-Account") }, // your authenticated principal
	})
	mux := http.NewServeMux()
	mux.Handle("POST /charges", mw(charge))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post(srv.URL+"/charges", "a8098c1a-f86e-11da-bd1a-00112444be1e", `{"amount":4200}`)
	post(srv.URL+"/charges", "a8098c1a-f86e-11da-bd1a-00112444be1e", `{"amount":4200}`) // the client's retry
	post(srv.URL+"/charges", "a8098c1a-f86e-11da-bd1a-00112444be1e", `{"amount":9900}`) // another request, same key
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed="" {"charge":"ch_1"}
	// 201 replayed="true" {"charge":"ch_1"}
	// 422 replayed="" {"type":"https://pkg.go.dev/github.com/sentinel-coordination/sentinel/idempotency#ProblemKeyReused","title":"Idempotency-Key reused","status":422,"detail":"this Idempotency-Key was already used for a different request (method, path, query or body differ); use a new key for a new request","idempotency_key":"a8098c1a-f86e-11da-bd1a-00112444be1e"}
	// charges: 1
}

// Transactional mode: the handler's database writes go through
// idempotency.Tx and commit together with the stored response, so the
// booking exists exactly once, whatever crashes in between.
func ExampleTx() {
	client, done := exampleClient()
	defer done()
	ctx := context.Background()
	if _, err := client.Pool().Exec(ctx, `CREATE TABLE bookings (id bigserial PRIMARY KEY, seat text NOT NULL)`); err != nil {
		panic(err)
	}

	book := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx := idempotency.Tx(r.Context())
		var id int64
		err := tx.QueryRow(r.Context(), `INSERT INTO bookings (seat) VALUES ('12A') RETURNING id`).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back, not stored
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "booking %d", id)
	})
	srv := httptest.NewServer(idempotency.Middleware(client, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true})(book))
	defer srv.Close()

	post(srv.URL, "seat-12A-for-ada", "")
	post(srv.URL, "seat-12A-for-ada", "")
	var n int
	_ = client.Pool().QueryRow(ctx, `SELECT count(*) FROM bookings`).Scan(&n)
	fmt.Println("bookings:", n)
	// Output:
	// 201 replayed="" booking 1
	// 201 replayed="true" booking 1
	// bookings: 1
}

// A handler that knows nothing happened gives the key back with NoEffect:
// that response is not stored, and the client's retry with the same key
// runs the handler again. Without NoEffect the 502 would be replayed.
func ExampleNoEffect() {
	client, done := exampleClient()
	defer done()

	reachable := false
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !reachable {
			reachable = true // the next attempt gets through
			idempotency.NoEffect(w)
			http.Error(w, "card network unreachable: nothing was charged", http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, "charged")
	})
	srv := httptest.NewServer(idempotency.Middleware(client, idempotency.Options{Scope: idempotency.SingleTenant})(charge))
	defer srv.Close()

	post(srv.URL, "order-77", "")
	post(srv.URL, "order-77", "") // the client's retry, same key
	post(srv.URL, "order-77", "") // and again: now replayed
	// Output:
	// 502 replayed="" card network unreachable: nothing was charged
	// 201 replayed="" charged
	// 201 replayed="true" charged
}

// A handler that cannot tell whether its effect happened (the card network
// timed out after the charge was sent) says so with Uncertain: the request
// and its retries get the uncertain problem, naming the command an
// operator runs, and the handler never runs again for the key.
func ExampleUncertain() {
	client, done := exampleClient()
	defer done()

	runs := 0
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		idempotency.Uncertain(w, fmt.Errorf("card network: read timeout after the request was sent"))
	})
	srv := httptest.NewServer(idempotency.Middleware(client, idempotency.Options{Scope: idempotency.SingleTenant})(charge))
	defer srv.Close()

	for i := 0; i < 2; i++ { // the request, then the client's retry
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(""))
		req.Header.Set("Idempotency-Key", "order-78")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		var p idempotency.Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, p.Type == idempotency.ProblemUncertain, strings.Contains(p.Detail, "sentinel idempotency inspect order-78"))
	}
	fmt.Println("handler runs:", runs)
	// Output:
	// 500 true true
	// 500 true true
	// handler runs: 1
}

// The command line that inspects a client's key, for a message to a
// person: it runs as printed.
func ExampleCommand() {
	fmt.Println(idempotency.Command("inspect", "8e03978e", "acct 42", "payments", "sentinel"))
	fmt.Println(idempotency.Command("resolve --refused", "8e03978e", "", "default", ""))
	// A key that reads as a flag goes after "--".
	fmt.Println(idempotency.Command("inspect", "-Xk3vQ9", "acct_42", "payments", ""))
	// Output:
	// sentinel idempotency inspect 8e03978e --scope 'acct 42' -n payments
	// sentinel idempotency resolve --refused 8e03978e
	// sentinel idempotency inspect --scope acct_42 -n payments -- -Xk3vQ9
}

// Options.Rerun for a handler whose charge the card network deduplicates by
// sentinel.EffectKey: the first attempt charges and then crashes (here a
// panic) before answering; the client's retry with the same key runs the
// handler again, the network returns the same charge, and the client gets
// its 201 instead of an uncertain problem.
func ExampleOptions_rerun() {
	client, done := exampleClient()
	defer done()

	network := map[string]string{} // the card network's charges, by idempotency key
	crashed := false
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ref := sentinel.EffectKey(r.Context()) // the same on every attempt of this request
		id, ok := network[ref]
		if !ok {
			id = fmt.Sprintf("ch_%d", len(network)+1)
			network[ref] = id
		}
		if !crashed {
			crashed = true
			panic("crash after the charge, before the response")
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%q,"attempt":%d}`, id, sentinel.Attempt(r.Context()))
	})
	srv := httptest.NewUnstartedServer(idempotency.Middleware(client, idempotency.Options{Required: true, Scope: idempotency.SingleTenant, Rerun: 3})(charge))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"amount":9900}`))
		req.Header.Set("Idempotency-Key", "order-78")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("no response: the server crashed mid-request")
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b)
	}
	fmt.Println("charges at the network:", len(network))
	// Output:
	// no response: the server crashed mid-request
	// 201 replayed="" {"charge":"ch_1","attempt":2}
	// 201 replayed="true" {"charge":"ch_1","attempt":2}
	// charges at the network: 1
}
