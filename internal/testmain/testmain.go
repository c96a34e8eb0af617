// Package testmain is the TestMain the project's test packages share: a
// test database (internal/testdb), an admin pool on it for assertions made
// behind the client's back, and a goroutine-leak check after the tests.
package testmain

import (
	"context"
	"log"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

// Run finds or starts the test database, sets *url to it and *admin to a
// pool on it, runs m, closes both, and fails the run if goroutines leaked.
// It returns the exit code for os.Exit. A failure to get a database is
// fatal, with testdb's message saying how to provide one.
func Run(m *testing.M, url *string, admin **pgxpool.Pool) int {
	ctx := context.Background()
	u, cleanup, err := testdb.URL(ctx, log.Printf)
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	p, err := pgxpool.New(ctx, u)
	if err != nil {
		cleanup()
		log.Fatal(err)
	}
	*url, *admin = u, p
	code := m.Run()
	// A test that failed while holding an admin connection (an open
	// transaction) would make Close wait forever and hide the failure
	// behind the test binary's timeout: bound it.
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		log.Printf("testmain: the admin pool did not close in 15s: a test left a connection (an open transaction?) checked out")
		return 1
	}
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			log.Printf("goleak: %v", err)
			code = 1
		}
	}
	return code
}
