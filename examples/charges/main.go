// Command charges is the Idempotency-Key middleware end to end: an HTTP API
// that books orders in PostgreSQL, in transactional mode, and a client that
// retries the way real clients do (lost responses, impatient duplicates, a
// server that crashes mid-request, a buggy client reusing a key).
//
//	go run ./examples/charges
//
// It uses $DATABASE_URL when set, otherwise a throwaway PostgreSQL
// started for the run (from local server binaries, else in a Docker
// container).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

const schema = "sentinel_charges_demo"

func main() {
	log.SetFlags(0)
	if err := run(os.Stdout); err != nil {
		log.Fatalf("charges demo: %v", err)
	}
}

// order is the API's request and response body.
type order struct {
	ID     int64  `json:"id,omitempty"`
	Item   string `json:"item"`
	Amount int    `json:"amount_cents"`
	Crash  bool   `json:"crash_after_insert,omitempty"` // demo only: the server dies mid-request
}

// api is the server: POST /orders books an order in the request's
// transaction, which commits together with the stored response.
func api(client *sentinel.Client) http.Handler {
	var crashed sync.Map
	book := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.Item == "" || o.Amount <= 0 {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		tx := idempotency.Tx(r.Context())
		err := tx.QueryRow(r.Context(), `INSERT INTO orders (item, amount_cents) VALUES ($1, $2) RETURNING id`, o.Item, o.Amount).Scan(&o.ID)
		if err != nil {
			http.Error(w, "database error", http.StatusInternalServerError) // 5xx: rolled back, not stored
			return
		}
		if _, done := crashed.LoadOrStore(r.Header.Get("Idempotency-Key"), true); o.Crash && !done {
			panic(http.ErrAbortHandler) // the process "dies" after the insert, before the response
		}
		o.Crash = false
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(o)
	})
	mw := idempotency.Middleware(client, idempotency.Options{
		Required:      true,
		Transactional: true,
		Scope:         func(r *http.Request) string { return r.Header.Get("X-Account") }, // an authenticated principal in real life
		Wait:          5 * time.Second,
	})
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw(book))
	return mux
}

func run(out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, cleanup, err := testdb.DemoURL(ctx, func(string, ...any) {})
	if err != nil {
		return err
	}
	defer cleanup()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q+" CASCADE"); err != nil {
		return err
	}
	defer func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+q+" CASCADE") }()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "http"})
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+q+".orders (id bigserial PRIMARY KEY, item text NOT NULL, amount_cents int NOT NULL)"); err != nil {
		return err
	}
	// The server's connections find the orders table in the demo schema.
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	apiPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer apiPool.Close()
	apiClient, err := sentinel.New(apiPool, &sentinel.Config{Schema: schema, Namespace: "http"})
	if err != nil {
		return err
	}
	defer apiClient.Close()

	srv := httptest.NewUnstartedServer(api(apiClient))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	defer srv.Close()

	// Go's http.Transport itself retries a request carrying an
	// Idempotency-Key when a reused connection fails; a fresh connection per
	// request shows the crash to the client as it happens.
	httpc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	post := func(key, body string) (int, string, string) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("X-Account", "acct_42")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := httpc.Do(req)
		if err != nil {
			return 0, "", "connection dropped: " + strings.TrimPrefix(err.Error(), "Post \""+srv.URL+"/orders\": ")
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b))
	}
	show := func(what string, status int, replayed, body string) {
		if status == 0 {
			fmt.Fprintf(out, "%-44s %s\n", what, body)
			return
		}
		if replayed != "" {
			replayed = " (Idempotent-Replayed: " + replayed + ")"
		}
		if strings.HasPrefix(body, "{\"type\"") {
			var p idempotency.Problem
			_ = json.Unmarshal([]byte(body), &p)
			body = p.Title
		}
		fmt.Fprintf(out, "%-44s %d%s %s\n", what, status, replayed, body)
	}

	fmt.Fprintln(out, "1. A response is lost; the client retries with the same key.")
	s, r, b := post("order-a", `{"item":"book","amount_cents":1200}`)
	show("   first attempt (say its response is lost)", s, r, b)
	s, r, b = post("order-a", `{"item":"book","amount_cents":1200}`)
	show("   retry", s, r, b)

	fmt.Fprintln(out, "2. An impatient client fires five duplicates at once.")
	var wg sync.WaitGroup
	var mu sync.Mutex
	bodies := map[string]int{}
	replays := 0
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, r, b := post("order-b", `{"item":"lamp","amount_cents":4500}`)
			mu.Lock()
			bodies[fmt.Sprintf("%d %s", s, b)]++
			if r == "true" {
				replays++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for b, n := range bodies {
		show(fmt.Sprintf("   %d of 5 got", n), 0, "", b)
	}
	fmt.Fprintf(out, "   the handler ran once; the other %d got its response replayed (waiting while it ran)\n", replays)

	fmt.Fprintln(out, "3. The server dies after inserting, before answering.")
	s, r, b = post("order-c", `{"item":"chair","amount_cents":8000,"crash_after_insert":true}`)
	show("   first attempt", s, r, b)
	s, r, b = post("order-c", `{"item":"chair","amount_cents":8000,"crash_after_insert":true}`)
	show("   retry (nothing was committed: runs afresh)", s, r, b)
	fmt.Fprintln(out, "   (the gap in order ids is the rolled-back insert)")

	fmt.Fprintln(out, "4. Client bugs.")
	s, r, b = post("order-a", `{"item":"book","amount_cents":9999}`)
	show("   same key, different order", s, r, b)
	s, r, b = post("", `{"item":"pen","amount_cents":100}`)
	show("   no Idempotency-Key", s, r, b)

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+q+".orders").Scan(&n); err != nil {
		return err
	}
	fmt.Fprintf(out, "\norders booked: %d (one per key: order-a, order-b, order-c)\n", n)
	if n != 3 || len(bodies) != 1 || replays != 4 {
		return fmt.Errorf("want 3 orders and one answer (4 replays) for the duplicates, got %d orders, %d answers, %d replays", n, len(bodies), replays)
	}
	return nil
}
