package main

import (
	"bytes"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if id := os.Getenv("QUEUE_DEMO_CUSTOMER"); id != "" {
		if err := customer(id); err != nil { // the re-executed test binary plays a customer
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The demo, end to end, as go run runs it (3 customers, 3 jobs each): it
// fails unless every job printed in ticket order without overlap and the
// fainted customer's turn was skipped.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 3, 3); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
}
