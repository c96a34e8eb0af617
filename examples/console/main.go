// Command console runs Sentinel's reconciliation page on its own:
//
//	export DATABASE_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
//	export SENTINEL_OPERATOR_TOKEN="$(openssl rand -hex 16)"
//	go run ./examples/console -addr 127.0.0.1:8380
//
// then open http://127.0.0.1:8380/. It listens on loopback unless -addr
// says otherwise; -read-only offers no action. Actions need the operator
// token from $SENTINEL_OPERATOR_TOKEN (never a flag: flags show in ps).
// With -demo it first creates an uncertain execution to look at.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

func main() {
	addr := flag.String("addr", console.DefaultAddr, "listen address (loopback by default)")
	readOnly := flag.Bool("read-only", false, "show everything, offer and accept no action")
	schema := flag.String("schema", "sentinel", "PostgreSQL schema of Sentinel's tables")
	namespace := flag.String("namespace", "", "namespace the start page lists, and of the -demo key (default: every namespace; the demo key in \"default\")")
	demo := flag.Bool("demo", false, "create an uncertain execution (key demo-payment) first")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: *schema, Namespace: *namespace})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if *demo {
		_, err := sentinel.Once(ctx, client, "demo-payment", func(context.Context) (string, error) {
			return "", errors.New("worker crashed after charging")
		})
		fmt.Println("demo-payment:", err)
	}
	h, err := console.New(client, console.Options{
		OperatorToken: os.Getenv("SENTINEL_OPERATOR_TOKEN"),
		ReadOnly:      *readOnly,
		Namespace:     *namespace,
	})
	if err != nil {
		log.Fatalf("%v (set SENTINEL_OPERATOR_TOKEN, or pass -read-only)", err)
	}
	if !console.IsLoopback(*addr) {
		log.Printf("warning: serving the console beyond loopback on %s; put your own authentication in front of it", *addr)
	}
	err = console.Serve(ctx, *addr, h, func(a net.Addr) { log.Printf("console on http://%s/", a) })
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
