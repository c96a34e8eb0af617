package main

import (
	"log"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if node := os.Getenv("LEADER_DEMO_NODE"); node != "" {
		// The re-executed test binary plays one scheduler process.
		if err := runNode(node); err != nil {
			log.Fatalf("node %s: %v", node, err)
		}
		return
	}
	os.Exit(m.Run())
}

// The demo end to end: it fails unless the ticks show one scheduler at a
// time, terms increasing, and no stale tick.
func TestDemo(t *testing.T) {
	if err := run(os.Stdout); err != nil {
		t.Fatal(err)
	}
}
