package sentinel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// retryProbe counts what OnceRetry did: fn's calls (with the attempt and
// effect key each saw), OnceRetry's retries (OnRetry) and the backoff it
// chose to sleep, and the time the call took.
type retryProbe struct {
	mu       sync.Mutex
	attempts []int    // Attempt(ctx) of each call of fn
	effects  []string // EffectKey(ctx) of each call of fn
	retried  []error  // the error of each attempt OnceRetry retried
	slept    time.Duration
	elapsed  time.Duration
	// between, if set, runs before each backoff (in OnRetry): another
	// caller acting on the key meanwhile.
	between func(retry int)
}

func (p *retryProbe) opts(o sentinel.RetryOptions) sentinel.RetryOptions {
	o.OnRetry = func(attempt int, err error, d time.Duration) {
		p.mu.Lock()
		p.retried = append(p.retried, err)
		p.slept += d
		p.mu.Unlock()
		if p.between != nil {
			p.between(attempt)
		}
	}
	return o
}

// fn returns a fn that records its attempt and effect key, then returns
// outcome(call) for its n-th call (1-based).
func (p *retryProbe) fn(outcome func(call int) error) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		p.mu.Lock()
		p.attempts = append(p.attempts, sentinel.Attempt(ctx))
		p.effects = append(p.effects, sentinel.EffectKey(ctx))
		n := len(p.attempts)
		p.mu.Unlock()
		if err := outcome(n); err != nil {
			return "", err
		}
		return "ch_1", nil
	}
}

func (p *retryProbe) run(ctx context.Context, c *sentinel.Client, key string, fn func(context.Context) (string, error),
	ropts sentinel.RetryOptions, opts ...sentinel.Option) (sentinel.Result[string], error) {
	start := time.Now()
	res, err := sentinel.OnceRetry(ctx, c, key, fn, p.opts(ropts), opts...)
	p.elapsed = time.Since(start)
	return res, err
}

// The retry options of these tests: a backoff long enough that a retry
// that should not happen shows in the time the call takes.
var slowRetry = sentinel.RetryOptions{MaxAttempts: 5, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond}

func timedOut(int) error { return errors.New("provider timed out") }

// OnceRetry under WithRerun retried every ErrUncertain that said the key
// would be re-run (ExecutionError.Rerun), also when this caller could
// never re-run it: a key whose attempts reached the caller's own WithRerun
// bound, though not the key's (another caller started it with a higher
// bound), is re-run only by a caller with a higher bound, so each retry
// got the same error, until MaxAttempts, sleeping its backoff each time,
// and then returned a *RetryError ("MaxAttempts reached") instead of the
// key's error. Now such an error is returned at once, and says that no
// re-run is left for this caller.
func TestOnceRetryStopsWhenNoRerunIsLeftForIt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)

	// Another caller declared 5 attempts; its attempts 1 and 2 stopped.
	var first retryProbe
	for i := 0; i < 2; i++ {
		_, err := sentinel.Once(ctx, c, "pay", first.fn(timedOut), sentinel.WithRerun(5))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	ex, err := c.Inspect(ctx, "pay")
	require.NoError(t, err)
	require.Equal(t, 2, ex.Attempt)
	require.True(t, ex.Rerunnable(), "a caller with a bound above 2 re-runs it")

	// This caller's bound, 2, is reached: it can never re-run the key.
	var p retryProbe
	_, err = p.run(ctx, c, "pay", p.fn(timedOut), slowRetry, sentinel.WithRerun(2))
	t.Logf("%v (in %s, %d retries, %s of backoff)", err, p.elapsed, len(p.retried), p.slept)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	var re *sentinel.RetryError
	require.False(t, errors.As(err, &re), "retried an error it cannot act on: %v", err)
	require.Empty(t, p.retried, "retries")
	require.Zero(t, p.slept, "backoff")
	require.Less(t, p.elapsed, slowRetry.BaseDelay, "time spent")
	require.Empty(t, p.attempts, "fn ran")
	require.ErrorContains(t, err, "no re-run is left")
	require.ErrorContains(t, err, "WithRerun(2)")
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.True(t, ee.Rerun, "the key is still re-run by a caller with a higher bound")

	// A caller with a higher bound re-runs it, under OnceRetry too.
	var q retryProbe
	res, err := q.run(ctx, c, "pay", q.fn(func(int) error { return nil }), slowRetry, sentinel.WithRerun(5))
	require.NoError(t, err)
	require.Equal(t, "ch_1", res.Value)
	require.Equal(t, []int{3}, q.attempts)
	require.Empty(t, q.retried)
}

// What OnceRetry retries under WithRerun, and what it returns at once: each
// case counts fn's calls (with their attempts), OnceRetry's retries and
// the backoff chosen.
func TestOnceRetryRerunOutcomes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	retryable := func(int) error { return sentinel.Retryable(errors.New("gateway busy")) }

	t.Run("last allowed attempt failed", func(t *testing.T) {
		var p retryProbe
		_, err := p.run(ctx, c, "last-failed", p.fn(timedOut), slowRetry, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.Equal(t, []int{1, 2}, p.attempts)
		require.Len(t, p.retried, 1, "only the re-run is retried")
		require.ErrorContains(t, err, "no re-run is left")
		var ee *sentinel.ExecutionError
		require.ErrorAs(t, err, &ee)
		require.False(t, ee.Rerun)
		var re *sentinel.RetryError
		require.False(t, errors.As(err, &re))
	})

	t.Run("last allowed attempt retryable", func(t *testing.T) {
		// Attempt 2 says nothing happened, but attempt 1 may have had
		// its effect: the key is uncertain, and not retried.
		var p retryProbe
		_, err := p.run(ctx, c, "last-retryable", p.fn(func(n int) error {
			if n == 1 {
				return timedOut(n)
			}
			return retryable(n)
		}), slowRetry, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.Equal(t, []int{1, 2}, p.attempts)
		require.Len(t, p.retried, 1)
		require.ErrorContains(t, err, "no re-run is left")
	})

	t.Run("key already spent", func(t *testing.T) {
		var runs retryProbe
		for i := 0; i < 2; i++ {
			_, _ = sentinel.Once(ctx, c, "spent", runs.fn(timedOut), sentinel.WithRerun(2))
		}
		var p retryProbe
		_, err := p.run(ctx, c, "spent", p.fn(timedOut), slowRetry, sentinel.WithRerun(5))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.Empty(t, p.attempts)
		require.Empty(t, p.retried)
		require.ErrorContains(t, err, "attempt 2, the last WithRerun allows (2): no re-run is left")
	})

	t.Run("retryable hand-back retried as before", func(t *testing.T) {
		var p retryProbe
		ropts := sentinel.RetryOptions{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
		_, err := p.run(ctx, c, "handback", p.fn(retryable), ropts, sentinel.WithRerun(2))
		var re *sentinel.RetryError
		require.ErrorAs(t, err, &re)
		require.Equal(t, "MaxAttempts reached", re.Reason)
		require.True(t, sentinel.IsRetryable(err))
		require.Equal(t, []int{1, 1, 1, 1, 1}, p.attempts, "a hand-back in attempt 1 starts the count again")
		require.Len(t, p.retried, 4)
	})
}

// Across OnceRetry's retries fn sees the same EffectKey every time, and
// the attempt WithRerun documents: a hand-back in attempt 1 (Retryable)
// runs attempt 1 again; an attempt that stopped without an outcome, or a
// Retryable in a re-run, is followed by the next attempt.
func TestOnceRetryAttemptsAndEffectKey(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var p retryProbe
	ropts := sentinel.RetryOptions{MaxAttempts: 10, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	res, err := p.run(ctx, c, "charge", p.fn(func(n int) error {
		switch n {
		case 1, 3:
			return sentinel.Retryable(errors.New("gateway busy"))
		case 2:
			return errors.New("provider timed out")
		}
		return nil
	}), ropts, sentinel.WithRerun(3))
	require.NoError(t, err)
	require.Equal(t, "ch_1", res.Value)
	require.Equal(t, []int{1, 1, 2, 3}, p.attempts)
	require.Len(t, p.retried, 3)
	for _, ek := range p.effects {
		require.Equal(t, sentinel.EffectKeyOf("default", "charge"), ek)
	}
}

// OnceRetry with WithRerun while another caller re-runs the key between
// its attempts: the retry gets what a new call gets, the other caller's
// outcome (replayed), its error when it left no re-run for this caller,
// or runs the next re-run itself when attempts are left for it.
func TestOnceRetryWhileAnotherCallerReruns(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	ropts := sentinel.RetryOptions{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}

	t.Run("other completes", func(t *testing.T) {
		var p, other retryProbe
		p.between = func(int) {
			_, err := sentinel.Once(ctx, b, "k1", other.fn(func(int) error { return nil }), sentinel.WithRerun(3))
			require.NoError(t, err)
		}
		res, err := p.run(ctx, a, "k1", p.fn(timedOut), ropts, sentinel.WithRerun(3))
		require.NoError(t, err)
		require.True(t, res.Cached)
		require.Equal(t, "ch_1", res.Value)
		require.Equal(t, []int{1}, p.attempts)
		require.Equal(t, []int{2}, other.attempts)
	})

	t.Run("other fails with attempts left for it only", func(t *testing.T) {
		// The other caller started the key with WithRerun(5), and its
		// re-run (attempt 2) holds the key as this caller, with
		// WithRerun(2), comes: in progress, retried; then the re-run
		// fails, leaving attempts for the other caller's bound only.
		var other retryProbe
		_, err := sentinel.Once(ctx, b, "k2", other.fn(timedOut), sentinel.WithRerun(5))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		running, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			_, err := sentinel.Once(ctx, b, "k2", other.fn(func(int) error {
				close(running)
				<-release
				return errors.New("provider timed out")
			}), sentinel.WithRerun(5))
			done <- err
		}()
		<-running
		var p retryProbe
		p.between = func(retry int) {
			if retry == 1 {
				close(release)
				require.ErrorIs(t, <-done, sentinel.ErrUncertain)
			}
		}
		_, err = p.run(ctx, a, "k2", p.fn(timedOut), ropts, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.ErrorContains(t, err, "no re-run is left")
		require.Empty(t, p.attempts)
		require.Equal(t, []int{1, 2}, other.attempts)
		require.Len(t, p.retried, 1, "retried once, while the other's re-run ran")
		require.ErrorIs(t, p.retried[0], sentinel.ErrInProgress)
	})

	t.Run("other spends the key", func(t *testing.T) {
		// This caller's attempt 1 recorded its bound, 2; the other's
		// re-run (attempt 2) fails: no re-run is left.
		var p, other retryProbe
		p.between = func(int) {
			_, err := sentinel.Once(ctx, b, "k4", other.fn(timedOut), sentinel.WithRerun(5))
			require.ErrorIs(t, err, sentinel.ErrUncertain)
		}
		_, err := p.run(ctx, a, "k4", p.fn(timedOut), ropts, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		require.ErrorContains(t, err, "attempt 2, the last WithRerun allows (2): no re-run is left")
		require.Equal(t, []int{1}, p.attempts)
		require.Equal(t, []int{2}, other.attempts)
		require.Len(t, p.retried, 1)
	})

	t.Run("other fails with attempts left for both", func(t *testing.T) {
		var p, other retryProbe
		p.between = func(retry int) {
			if retry == 1 {
				_, err := sentinel.Once(ctx, b, "k3", other.fn(timedOut), sentinel.WithRerun(5))
				require.ErrorIs(t, err, sentinel.ErrUncertain)
			}
		}
		res, err := p.run(ctx, a, "k3", p.fn(func(n int) error {
			if n == 1 {
				return timedOut(n)
			}
			return nil
		}), ropts, sentinel.WithRerun(4))
		require.NoError(t, err)
		require.False(t, res.Cached)
		require.Equal(t, []int{1, 3}, p.attempts)
		require.Equal(t, []int{2}, other.attempts)
	})
}
