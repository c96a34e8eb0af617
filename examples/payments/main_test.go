package main

import (
	"os"
	"testing"

	"github.com/sentinel-coordination/sentinel/sentineltest"
)

func TestMain(m *testing.M) {
	if os.Getenv("PAYMENTS_DEMO_CRASHER") != "" {
		crasher() // the re-executed test binary plays the crashing worker
		return
	}
	sentineltest.Main(m)
}

// The demo, end to end on a small batch: it fails unless every payment is
// charged exactly once and the crashed one is reconciled. The database
// comes from sentineltest, as a user's tests would get theirs.
func TestDemo(t *testing.T) {
	t.Setenv("DATABASE_URL", sentineltest.DatabaseURL(t))
	if err := run(12, 3); err != nil {
		t.Fatal(err)
	}
}
