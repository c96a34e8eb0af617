package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// The reconciliation page mounted in your own server, behind your own
// authentication. Every operator has a token of at least 128 bits; a
// weaker one, or one made of words, is refused at start.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: "example_console"})
	if err != nil {
		panic(err)
	}
	defer func() {
		client.Close()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_console CASCADE")
	}()
	if err := client.Migrate(ctx); err != nil {
		panic(err)
	}

	_, err = console.New(client, console.Options{Operators: map[string]string{"ada": "hunter2"}})
	fmt.Println("weak token refused:", errors.Is(err, console.ErrWeakToken))

	h, err := console.New(client, console.Options{
		// One token per operator (NewToken, or `sentinel serve --new-token`);
		// the history names whose token acted.
		Operators:    map[string]string{"ada": console.NewToken()},
		AllowedHosts: []string{"ops.example.com"}, // the name your server answers to
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/sentinel/", http.StripPrefix("/sentinel", h)) // wrap h in your authentication
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/sentinel/")
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println("start page:", resp.Status)
	// Output:
	// weak token refused: true
	// start page: 200 OK
}

// An operator token for Options.OperatorToken or Options.Operators: 256
// random bits, base64url. `sentinel serve --new-token` prints one.
func ExampleNewToken() {
	tok := console.NewToken()
	fmt.Println(len(tok))
	// Output: 43
}
