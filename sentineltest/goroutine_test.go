package sentineltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sentinel-coordination/sentinel"
)

const goroutineChildEnv = "SENTINELTEST_GOROUTINE_CHILD"

// Workers started by a test may each call New: they share the test's
// schema, so they compete as the processes of a deployment do.
func TestNewFromWorkerGoroutines(t *testing.T) {
	var ran atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := New(t)
			_, err := sentinel.Once(ctxT(t), c, "job", func(context.Context) (int, error) { ran.Add(1); return 1, nil })
			if err != nil && !errors.Is(err, sentinel.ErrInProgress) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if ran.Load() != 1 {
		t.Fatalf("the job ran %d times across the workers' clients, want once", ran.Load())
	}
}

// TestGoroutineFailureChild is the child of
// TestFailureOnAWorkerGoroutine: a test whose worker goroutine calls New
// with no usable database.
func TestGoroutineFailureChild(t *testing.T) {
	if os.Getenv(goroutineChildEnv) == "" {
		t.Skip("child process of TestFailureOnAWorkerGoroutine")
	}
	ended := make(chan bool, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		returned := false
		defer func() { ended <- returned }()
		New(t)
		returned = true
	}()
	wg.Wait()
	fmt.Printf("CHILD: New returned on the worker: %v; the test goroutine goes on; failed: %v\n", <-ended, t.Failed())
	DatabaseURL(t) // on the test goroutine: a fresh attempt, which fails and ends the test
	fmt.Println("CHILD: DatabaseURL returned on the test goroutine")
}

// A helper that fails on a goroutine the test started does what the
// package documentation says: the test fails with the helper's message,
// the goroutine ends with its deferred calls run, and the test goroutine
// goes on; nothing the helper held stays locked, so a later call on the
// test goroutine fails at once in turn.
func TestFailureOnAWorkerGoroutine(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestGoroutineFailureChild$", "-test.count=1", "-test.timeout=2m")
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvURL+"=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, goroutineChildEnv+"=1", EnvURL+"=postgres://postgres@127.0.0.1:1/none?connect_timeout=5")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child passed:\n%s", out)
	}
	s := string(out)
	for _, want := range []string{
		"CHILD: New returned on the worker: false; the test goroutine goes on; failed: true",
		"--- FAIL: TestGoroutineFailureChild",
		"$" + EnvURL,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the child's output lacks %q:\n%s", want, s)
		}
	}
	for _, bad := range []string{"CHILD: DatabaseURL returned", "panic:", "timed out"} {
		if strings.Contains(s, bad) {
			t.Errorf("the child's output has %q:\n%s", bad, s)
		}
	}
}
