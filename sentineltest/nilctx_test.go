package sentineltest_test

import (
	"testing"

	"github.com/sentinel-coordination/sentinel/internal/ctxcalls"
)

// The package has no exported call that takes a context.Context. One added
// must refuse a nil ctx with an error matching sentinel.ErrInvalid, as
// every such call of the sentinel package does (its
// TestNilContextRefusedByEveryCall); this fails until it is given a test
// of that, and its name is added here.
func TestNilContextTableIsComplete(t *testing.T) {
	calls, err := ctxcalls.Exported(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 0 {
		t.Fatalf("exported calls taking a ctx, with no nil-ctx test: %v", calls)
	}
}
