// Package testmain is the TestMain the project's test packages share: a
// test database (internal/testdb), an admin pool on it for assertions made
// behind the client's back, and a goroutine-leak check after the tests.
package testmain

import (
	"bufio"
	"context"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
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

// KillInside re-executes the test binary with env added (the child mode
// its TestMain recognises), waits for the child to print "INSIDE" (it is
// inside fn) and SIGKILLs it: a worker killed mid-execution.
func KillInside(t testing.TB, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
			return
		}
		line <- "EOF"
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "INSIDE" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child said %q, want INSIDE", l)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("child never entered fn")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}
