package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/sentinel-coordination/sentinel/sentineltest"
)

func TestMain(m *testing.M) {
	if key := os.Getenv(workerEnv); key != "" {
		workerA(key) // the re-executed test binary plays worker A
		return
	}
	sentineltest.Main(m)
}

// The demo end to end: worker A, a real process, is SIGKILLed in the middle
// of a charge; River's rescuer redelivers the job to worker B, which must
// not charge it again; the operator's retry replays the stored receipt.
// The database comes from sentineltest, as a user's tests would get theirs.
func TestRedeliveryAfterKillDoesNotChargeTwice(t *testing.T) {
	t.Setenv("DATABASE_URL", sentineltest.DatabaseURL(t))
	var out bytes.Buffer
	s, err := run(context.Background(), &out, 5)
	t.Logf("demo output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if s.charges != 5 || s.twice != 0 {
		t.Errorf("card network: %d charges for 5 payments, %d charged twice", s.charges, s.twice)
	}
	if s.attempts != 3 {
		t.Errorf("the killed payment's job took %d attempts, want 3 (killed, redelivered by River, retried by the operator)", s.attempts)
	}
	if s.states != "completed 5" {
		t.Errorf("River's jobs: %s, want all 5 completed", s.states)
	}
	for _, want := range []string{
		"worker A  payment-0001  attempt 1: charged ch_",
		"worker B  " + s.crashed + "  attempt 2: Sentinel: an earlier attempt was cut off mid-charge (uncertain), not charged again",
		"worker B  " + s.crashed + "  attempt 3: Sentinel replayed the stored receipt ch_",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
