package sentinel_test

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// A client over a pgx pool, its schema migrated at start-up. In a program
// the URL is usually os.Getenv("DATABASE_URL").
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, err := sentinel.New(pool, &sentinel.Config{Schema: "example_new", Namespace: "payments"})
	if err != nil {
		panic(err) // *InvalidError: a bad Config, nothing written
	}
	defer func() {
		client.Close()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_new CASCADE")
	}()
	if err := client.Migrate(ctx); err != nil { // idempotent, safe from many processes at once
		panic(err)
	}
	st, err := client.MigrationStatus(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("namespace:", client.Config().Namespace, "pending migrations:", len(st.Pending))
	// Output: namespace: payments pending migrations: 0
}

// The migrations as files, for goose, golang-migrate or tern instead of
// Migrate.
func ExampleMigrationFS() {
	files, err := fs.Glob(sentinel.MigrationFS("sentinel"), "*.up.sql")
	if err != nil {
		panic(err)
	}
	fmt.Println(files[0], len(files) > 1)
	// Output: 001_init.up.sql true
}
