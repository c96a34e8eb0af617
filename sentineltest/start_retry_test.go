package sentineltest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// fatalTB records what a helper reports instead of failing the test that
// runs it; FailNow and Fatal* end the calling goroutine as testing's do.
// Cleanups run on demand (end).
type fatalTB struct {
	fakeTB
	mu       sync.Mutex
	failed   bool
	messages []string
}

func (f *fatalTB) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.messages = append(f.messages, s)
}

func (f *fatalTB) Errorf(format string, args ...any) { f.record(fmt.Sprintf(format, args...)) }
func (f *fatalTB) Error(args ...any)                 { f.record(fmt.Sprint(args...)) }
func (f *fatalTB) Fail()                             { f.record("Fail") }
func (f *fatalTB) FailNow()                          { f.record("FailNow"); runtime.Goexit() }
func (f *fatalTB) Fatal(args ...any)                 { f.record(fmt.Sprint(args...)); runtime.Goexit() }
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.record(fmt.Sprintf(format, args...))
	runtime.Goexit()
}
func (f *fatalTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}
func (f *fatalTB) text() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.messages, "\n")
}

// call runs fn on a goroutine of its own, as a test would, and reports
// whether it returned (false: it ended by FailNow).
func (f *fatalTB) call(fn func()) (returned bool) {
	done := make(chan bool)
	go func() {
		ok := false
		defer func() { done <- ok }()
		fn()
		ok = true
	}()
	return <-done
}

// isolateServer gives the test a server state of its own, as a new test
// binary without Main has (nothing started, nothing failed), and restores
// the binary's when the test ends.
func isolateServer(t *testing.T) {
	t.Helper()
	server.mu.Lock()
	saved := server.serverState
	server.serverState = serverState{}
	server.mu.Unlock()
	t.Cleanup(func() {
		server.mu.Lock()
		defer server.mu.Unlock()
		if server.stop != nil {
			t.Errorf("the test left a server running")
			stopLocked()
		}
		server.serverState = saved
	})
}

// notADirectory returns a path that exists and is not a directory, whose
// parents are searchable by every user: with $TMPDIR set to it, the
// private cluster's temporary directory cannot be created, and the
// search for a database fails (no Docker engine is reachable, or Docker
// starts one: the test then skips).
func notADirectory(t *testing.T) string {
	t.Helper()
	f, err := os.CreateTemp("/tmp", "sentineltest-notadir-")
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(f.Name()) })
	return f.Name()
}

// failStart makes one test of the binary fail to start the private
// cluster, and returns what it was told.
func failStart(t *testing.T, notDir string) string {
	t.Helper()
	var msg string
	t.Run("broken", func(t *testing.T) {
		t.Setenv("TMPDIR", notDir)
		f := &fatalTB{fakeTB: fakeTB{TB: t}}
		defer f.end()
		if f.call(func() { _ = url(f) }) {
			t.Skip("a database was found with $TMPDIR a regular file (a Docker engine?): cannot force a failed start")
		}
		msg = f.text()
	})
	return msg
}

// A private cluster that fails to start (here: its temporary directory
// cannot be created) fails the test that asked for it; a later test of
// the same binary, once the cause is gone, gets a fresh attempt and its
// database, instead of the first failure again.
func TestFailedStartIsRetriedByALaterTest(t *testing.T) {
	isolateServer(t)
	t.Setenv(EnvURL, "")
	msg := failStart(t, notADirectory(t))
	if !strings.Contains(msg, "not a directory") {
		t.Fatalf("the failed start's message lacks its cause: %q", msg)
	}

	later := &fatalTB{fakeTB: fakeTB{TB: t}}
	defer later.end() // stops the cluster
	var u string
	if !later.call(func() { u = url(later) }) {
		t.Fatalf("a later test, with the cause gone, was failed without a fresh attempt:\n%s", later.text())
	}
	conn, err := pgx.Connect(ctxT(t), u)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(context.Background())
}

// A start that keeps failing is tried by maxStartAttempts tests in a row;
// later tests fail at once, told how many attempts failed, the first
// error, and that no new attempt is made.
func TestFailedStartsStopAfterMaxAttempts(t *testing.T) {
	isolateServer(t)
	t.Setenv(EnvURL, "")
	notDir := notADirectory(t)
	for i := 1; i <= maxStartAttempts; i++ {
		msg := failStart(t, notDir)
		if !strings.Contains(msg, "not a directory") || !strings.Contains(msg, fmt.Sprintf("failed in %d test(s)", i)) {
			t.Fatalf("attempt %d: %q", i, msg)
		}
		if again := strings.Contains(msg, "a later test of this binary tries again"); again != (i < maxStartAttempts) {
			t.Fatalf("attempt %d: says a later test tries again: %v: %q", i, again, msg)
		}
	}
	server.mu.Lock()
	failures := server.startFailures
	server.mu.Unlock()
	msg := failStart(t, notDir)
	server.mu.Lock()
	after := server.startFailures
	server.mu.Unlock()
	if after != failures {
		t.Fatalf("a test after %d failed starts tried again", failures)
	}
	for _, want := range []string{"no new attempt", "no later test", "The first error", "not a directory"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message after %d failed starts lacks %q: %q", failures, want, msg)
		}
	}
}

// A test whose schema could not be made leaves no entry behind in envs
// (which would keep the test, and its logs, for the life of the binary).
func TestFailedEnvLeavesNoEntry(t *testing.T) {
	isolateServer(t)
	t.Setenv(EnvURL, "postgres://postgres@127.0.0.1:1/none?connect_timeout=5")
	f := &fatalTB{fakeTB: fakeTB{TB: t}}
	defer f.end()
	if f.call(func() { Pool(f) }) {
		t.Fatal("Pool returned with no usable database")
	}
	envs.mu.Lock()
	_, kept := envs.m[f]
	envs.mu.Unlock()
	if kept {
		t.Fatal("a failed Pool left its test's entry in envs")
	}
}
