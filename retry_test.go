package sentinel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestOnceRetryRunsAgainAfterRetryable(t *testing.T) {
	c := newEnv(t).client(nil)
	var calls atomic.Int64
	res, err := sentinel.OnceRetry(ctxT(t), c, "flaky", func(context.Context) (string, error) {
		if calls.Add(1) < 3 {
			return "", sentinel.Retryable(errors.New("gateway busy"))
		}
		return "paid", nil
	}, sentinel.RetryOptions{BaseDelay: time.Millisecond})
	if err != nil || res.Value != "paid" || res.Cached || calls.Load() != 3 {
		t.Fatalf("%+v, %v after %d calls", res, err, calls.Load())
	}
}

func TestOnceRetryWaitsOutInProgress(t *testing.T) {
	e := newEnv(t)
	a, b := e.client(nil), e.client(nil)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctxT(t), a, "shared", func(context.Context) (int, error) {
			close(started)
			<-release
			return 42, nil
		})
		done <- err
	}()
	<-started
	var inProgress atomic.Int64
	// fn of the first call returns once the retrying call has seen the
	// key in progress: a fixed sleep raced b's first claim on a loaded
	// machine, which then found the key completed (no in-progress retry).
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	res, err := sentinel.OnceRetry(ctxT(t), b, "shared", func(context.Context) (int, error) {
		t.Error("fn ran twice")
		return 0, nil
	}, sentinel.RetryOptions{MaxAttempts: -1, MaxElapsed: 30 * time.Second, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond,
		OnRetry: func(_ int, err error, _ time.Duration) {
			if errors.Is(err, sentinel.ErrInProgress) {
				inProgress.Add(1)
				releaseOnce.Do(func() { close(release) })
			}
		}})
	if err != nil || !res.Cached || res.Value != 42 || inProgress.Load() == 0 {
		t.Fatalf("%+v, %v (in-progress retries %d)", res, err, inProgress.Load())
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOnceRetryStopsAtUncertain(t *testing.T) {
	c := newEnv(t).client(nil)
	var calls atomic.Int64
	_, err := sentinel.OnceRetry(ctxT(t), c, "boom", func(context.Context) (int, error) {
		calls.Add(1)
		return 0, errors.New("card declined after charge attempt")
	}, sentinel.RetryOptions{BaseDelay: time.Millisecond})
	if !errors.Is(err, sentinel.ErrUncertain) || calls.Load() != 1 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
	var re *sentinel.RetryError
	if errors.As(err, &re) {
		t.Fatal("an uncertain outcome was retried")
	}
	// The next call is uncertain too, and still not retried.
	_, err = sentinel.OnceRetry(ctxT(t), c, "boom", func(context.Context) (int, error) { calls.Add(1); return 0, nil },
		sentinel.RetryOptions{BaseDelay: time.Millisecond})
	if !errors.Is(err, sentinel.ErrUncertain) || calls.Load() != 1 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
}

func TestOnceRetryStopsAtFinal(t *testing.T) {
	c := newEnv(t).client(nil)
	var calls atomic.Int64
	for i := 0; i < 2; i++ {
		_, err := sentinel.OnceRetry(ctxT(t), c, "declined", func(context.Context) (int, error) {
			calls.Add(1)
			return 0, sentinel.Final(errors.New("card declined"))
		}, sentinel.RetryOptions{BaseDelay: time.Millisecond})
		if !errors.Is(err, sentinel.ErrFinal) || calls.Load() != 1 {
			t.Fatalf("call %d: %v after %d runs", i, err, calls.Load())
		}
	}
}

// OnceRetry under WithRerun: an attempt that stopped without an outcome
// with attempts left (fn's error: the provider may have charged) was
// returned at once as ErrUncertain, though the caller declared the effect
// deduplicated and the next call would re-run it; the re-run waited for
// whatever called OnceRetry again. It is now the retry, bounded by
// WithRerun's attempts; without WithRerun nothing changes.
func TestOnceRetryRunsTheRerun(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	ropts := sentinel.RetryOptions{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}

	var attempts []int
	flaky := func(ctx context.Context) (string, error) {
		attempts = append(attempts, sentinel.Attempt(ctx))
		if len(attempts) == 1 {
			return "", errors.New("provider timed out")
		}
		return "ch_1", nil
	}
	res, err := sentinel.OnceRetry(ctx, c, "pay-flaky", flaky, ropts, sentinel.WithRerun(3))
	require.NoError(t, err)
	require.Equal(t, "ch_1", res.Value)
	require.Equal(t, []int{1, 2}, attempts, "the retry is the re-run")

	attempts = nil
	fails := func(ctx context.Context) (string, error) {
		attempts = append(attempts, sentinel.Attempt(ctx))
		return "", errors.New("provider timed out")
	}
	_, err = sentinel.OnceRetry(ctx, c, "pay-down", fails, ropts, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.False(t, ee.Rerun, "no re-run left: %v", err)
	require.Equal(t, []int{1, 2, 3}, attempts, "bounded by WithRerun")

	attempts = nil
	_, err = sentinel.OnceRetry(ctx, c, "pay-plain", fails, ropts)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Equal(t, []int{1}, attempts, "without WithRerun: returned at once")
}
