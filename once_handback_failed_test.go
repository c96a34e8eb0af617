package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn returns Retryable but handing the key back fails: here
// Config.ReleaseTimeout runs out while another transaction holds the
// key's row lock. The caller got "X (and releasing the claim failed: ...
// context deadline exceeded)", which matched Retryable ("try again now")
// and not ErrUncertain, though the key stayed executing: a retry got
// ErrInProgress, then every later caller ErrUncertain, with nothing saying
// that fn had reported no effect. The key is now read back: it is still
// this attempt's, so the error matches ErrUncertain (not Retryable), wraps
// fn's error, and says that the key stays held until its lease expires,
// what later callers get, and that a hand-back still pending may land.
func TestRetryableWhoseHandBackFailsSaysTheKeyIsHeld(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{ReleaseTimeout: 200 * time.Millisecond})
	fnErr := errors.New("gateway said no before the charge")
	locked := make(chan struct{})
	unlock := make(chan struct{})
	lockDone := make(chan error, 1)
	_, err := sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) {
		go func() {
			tx, err := admin.Begin(context.Background())
			if err == nil {
				_, err = tx.Exec(context.Background(), "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'k' FOR UPDATE")
			}
			close(locked)
			<-unlock
			if tx != nil {
				_ = tx.Rollback(context.Background())
			}
			lockDone <- err
		}()
		<-locked
		return 0, sentinel.Retryable(fnErr)
	}, sentinel.WithTTL(2*time.Second), sentinel.WithHardTTL(time.Hour))
	close(unlock)
	require.NoError(t, <-lockDone)
	require.Error(t, err)
	t.Log(err)
	require.ErrorIs(t, err, fnErr)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, sentinel.IsRetryable(err), "a retry now gets ErrInProgress, then ErrUncertain")
	require.False(t, sentinel.ShouldRetry(err))
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, sentinel.StateExecuting, ee.State)
	require.False(t, ee.LeaseExpiresAt.IsZero(), "when the lease expires")
	require.Contains(t, err.Error(), "handing the key back failed")
	require.Contains(t, err.Error(), "until its lease expires")
	// The operator who finds the key uncertain sees that fn reported no
	// effect.
	events, err := c.LastRun(ctx, "k")
	require.NoError(t, err)
	found := false
	for _, ev := range events {
		if ev.Type == "retryable" && ev.Metadata["error"] == fnErr.Error() {
			found = true
		}
	}
	require.True(t, found, "%+v", events)
}
