package main

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("PAYMENTS_DEMO_CRASHER") != "" {
		crasher() // the re-executed test binary plays the crashing worker
		return
	}
	os.Exit(m.Run())
}

// The demo, end to end on a small batch: it fails unless every payment is
// charged exactly once and the crashed one is reconciled.
func TestDemo(t *testing.T) {
	if err := run(12, 3); err != nil {
		t.Fatal(err)
	}
}
