package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Do's doc: when the lease was lost while fn ran, Do's error matches
// ErrLeaseLost, whatever fn returned. A takeover that no renewal saw
// before fn returned is found by Do's release: that loss must be in Do's
// error when fn failed too, not only when fn succeeded (a failed release
// is what is reported only when fn succeeded, not a loss).
func TestDoReportsALossItsReleaseFindsWhenFnFailed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	boom := errors.New("boom")
	for _, fnErr := range []error{boom, nil} {
		key := "do-release-finds-loss"
		if fnErr == nil {
			key += "-nil"
		}
		err := a.Do(ctx, key, func(ctx context.Context, l *sentinel.Lease) error {
			// Taken over by force; the TTL is long, so no renewal of a's
			// runs before fn returns and the release finds the row taken.
			f, err := b.Lease(ctx, key, sentinel.WithForce(), sentinel.WithTTL(10*time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { _ = f.Release(context.Background()) })
			return fnErr
		}, sentinel.WithTTL(10*time.Second))
		if fnErr != nil {
			require.ErrorIs(t, err, boom, "fn's error is returned")
		}
		require.ErrorIs(t, err, sentinel.ErrLeaseLost, "fn error %v: the loss its release found must be reported", fnErr)
		require.ErrorIs(t, err, sentinel.ErrStaleToken)
	}
}
