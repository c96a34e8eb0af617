package sentineltest_test

import (
	"context"
	"testing"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A nil Option (an option chosen conditionally and left unset) and
// WithPoolConfig(nil) are skipped, as the sentinel package and
// otelsentinel skip nil options, instead of panicking with a nil
// dereference inside the helper.
func TestNilOptionsAreSkipped(t *testing.T) {
	var maybeShared sentineltest.Option // left nil: not shared
	c := sentineltest.New(t, maybeShared, sentineltest.WithPoolConfig(nil))
	if _, err := sentinel.Once(context.Background(), c, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
		t.Fatal(err)
	}
	p := sentineltest.Pool(t, nil, sentineltest.WithPoolConfig(nil))
	if err := p.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
