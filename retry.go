package sentinel

// This file: Retry, OnceRetry and ShouldRetry: retrying with backoff what may be retried (RetryOptions, RetryError).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryOptions bound Retry and OnceRetry. The zero value retries up to 5
// attempts in all, with delays drawn from [0, 50ms), [0, 100ms), [0, 200ms),
// ... capped at 5s, and no time limit beyond the ctx.
type RetryOptions struct {
	// MaxAttempts is the most calls of fn, the first included. Default 5.
	// Negative means no limit; MaxElapsed must then be set.
	MaxAttempts int

	// MaxElapsed stops retrying when the next attempt would start more than
	// this long after the first. Zero: no limit beyond MaxAttempts and ctx.
	MaxElapsed time.Duration

	// BaseDelay is the cap of the first backoff; each retry doubles it, up
	// to MaxDelay. The delay actually slept is drawn uniformly from
	// [0, cap) ("full jitter"), so competing callers spread out. Defaults
	// 50ms and 5s.
	BaseDelay time.Duration
	MaxDelay  time.Duration

	// OnRetry, if set, is called before each backoff with the attempt that
	// failed (1 for the first call), its error and the delay about to be
	// slept.
	OnRetry func(attempt int, err error, delay time.Duration)

	// Test hooks (set by this package's tests only).
	sleep func(ctx context.Context, d time.Duration) error
	rand  func() float64
	now   func() time.Time
}

// Defaults of RetryOptions.
const (
	DefaultRetryAttempts  = 5
	DefaultRetryBaseDelay = 50 * time.Millisecond
	DefaultRetryMaxDelay  = 5 * time.Second
)

// neverRetried are outcomes that no retry may change: the key crossed the
// execution boundary (uncertain), an operator is establishing it, or fn
// completed it with a final error.
var neverRetried = []error{ErrUncertain, ErrReconciling, ErrFinal}

// ShouldRetry reports whether Retry retries err: an error marked with
// Retryable (fn said nothing happened) or ErrInProgress (another worker
// holds the key; its stored result may be replayed soon). An uncertain,
// reconciling or final outcome (ErrUncertain, ErrReconciling, ErrFinal) is
// never retried, whatever else err wraps, and neither is any other error.
func ShouldRetry(err error) bool {
	if err == nil || IsFinal(err) {
		return false
	}
	for _, never := range neverRetried {
		if errors.Is(err, never) {
			return false
		}
	}
	return IsRetryable(err) || errors.Is(err, ErrInProgress)
}

// RetryError reports that Retry gave up on a retryable error. It wraps the
// last error (so errors.Is(err, ErrInProgress) still holds) and, when the
// ctx ended, the ctx's error.
type RetryError struct {
	Attempts int           // calls of fn made
	Elapsed  time.Duration // since the first call
	Reason   string        // "MaxAttempts reached", "MaxElapsed reached", "context done"
	Err      error         // the last attempt's error
	ctxErr   error
}

func (e *RetryError) Error() string {
	s := fmt.Sprintf("sentinel: gave up after %d attempts in %s (%s): %v", e.Attempts, e.Elapsed.Round(time.Millisecond), e.Reason, e.Err)
	if e.ctxErr != nil {
		s += " (" + e.ctxErr.Error() + ")"
	}
	return s
}

// Unwrap returns the last error and, when the ctx ended, its error.
func (e *RetryError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.ctxErr}
}

func (o RetryOptions) withDefaults() (RetryOptions, error) {
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultRetryAttempts
	}
	if o.BaseDelay == 0 {
		o.BaseDelay = DefaultRetryBaseDelay
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = max(DefaultRetryMaxDelay, o.BaseDelay)
	}
	switch {
	case o.MaxAttempts < 0 && o.MaxElapsed <= 0:
		return o, invalid("RetryOptions", "unlimited MaxAttempts needs a MaxElapsed bound")
	case o.MaxElapsed < 0:
		return o, invalid("RetryOptions", "MaxElapsed must not be negative, got %s", o.MaxElapsed)
	case o.BaseDelay < 0 || o.MaxDelay < o.BaseDelay:
		return o, invalid("RetryOptions", "need 0 <= BaseDelay <= MaxDelay, got %s and %s", o.BaseDelay, o.MaxDelay)
	}
	if o.sleep == nil {
		o.sleep = sleepCtx
	}
	if o.rand == nil {
		o.rand = rand.Float64
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// backoff is the full-jitter delay before retry number n (1-based).
func (o RetryOptions) backoff(n int) time.Duration {
	capd := o.MaxDelay
	if n-1 < 62 && o.BaseDelay <= o.MaxDelay>>(n-1) {
		capd = o.BaseDelay << (n - 1)
	}
	return time.Duration(o.rand() * float64(capd))
}

// Retry calls fn until it returns nil or an error ShouldRetry rejects,
// sleeping an exponentially growing, fully jittered delay between
// attempts, within the bounds of opts and ctx. It returns nil, fn's last
// error when it is not retryable (unchanged, so errors.Is(err, ErrUncertain)
// works), or a *RetryError wrapping the last retryable error when a bound
// was reached. Bad opts: an *InvalidError, and fn is not called.
// A nil ctx is refused (ErrInvalid).
func Retry(ctx context.Context, opts RetryOptions, fn func(ctx context.Context) error) error {
	if err := checkCtx("Retry", ctx); err != nil {
		return err
	}
	return retry(ctx, opts, fn, ShouldRetry)
}

// retry is Retry, retrying the errors should accepts.
func retry(ctx context.Context, opts RetryOptions, fn func(ctx context.Context) error, should func(error) bool) error {
	o, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("fn", "must not be nil")
	}
	start := o.now()
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if !should(err) {
			return err
		}
		giveUp := func(reason string, ctxErr error) error {
			return &RetryError{Attempts: attempt, Elapsed: o.now().Sub(start), Reason: reason, Err: err, ctxErr: ctxErr}
		}
		if o.MaxAttempts > 0 && attempt >= o.MaxAttempts {
			return giveUp("MaxAttempts reached", nil)
		}
		if ctx.Err() != nil {
			return giveUp("context done", context.Cause(ctx))
		}
		d := o.backoff(attempt)
		if o.MaxElapsed > 0 && o.now().Add(d).Sub(start) > o.MaxElapsed {
			return giveUp("MaxElapsed reached", nil)
		}
		if o.OnRetry != nil {
			o.OnRetry(attempt, err, d)
		}
		if serr := o.sleep(ctx, d); serr != nil {
			return giveUp("context done", serr)
		}
	}
}

// OnceRetry is Once under Retry: a Retryable outcome of fn, or a key in
// progress elsewhere, is tried again with backoff (a retry of an in-progress
// key usually replays the result the other worker stored). Under WithRerun,
// an attempt that stopped without an outcome with attempts left (ErrUncertain
// with ExecutionError.Rerun) is retried too: the retry is the re-run,
// bounded by WithRerun's attempts as well as by ropts. Every other
// ErrUncertain is returned at once, unchanged (not as a *RetryError), and
// so are reconciling and final outcomes: a key whose attempts are spent
// (fn's last allowed attempt failed, or returned Retryable after an
// earlier attempt may have had its effect), and a key left for a re-run
// that this call's own WithRerun bound does not allow (another caller,
// with a higher bound, ran it as far: ExecutionError.Rerun, but the error
// says that no re-run is left for this call), which no retry could change.
// A nil ctx is refused (ErrInvalid).
func OnceRetry[T any](ctx context.Context, c *Client, key string, fn func(ctx context.Context) (T, error), ropts RetryOptions, opts ...Option) (Result[T], error) {
	if err := checkCtx("OnceRetry", ctx); err != nil {
		return Result[T]{}, err
	}
	var res Result[T]
	should := ShouldRetry
	if rerunRequested(opts) {
		should = func(err error) bool { return ShouldRetry(err) || rerunPendingErr(err) }
	}
	err := retry(ctx, ropts, func(ctx context.Context) error {
		var err error
		res, err = Once(ctx, c, key, fn, opts...)
		return err
	}, should)
	return res, err
}

// rerunRequested reports whether opts ask for re-runs (WithRerun above 1).
func rerunRequested(opts []Option) bool {
	var o callOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o.rerunSet && o.rerun > 1
}

// rerunPendingErr reports whether err says that the key's next Once call
// with WithRerun runs fn again (ExecutionError.Rerun) and that the call
// that got it may be that call: its own bound is above the key's attempt.
// A key left for callers with a higher bound only is not: retrying it
// would get the same error until a bound of ropts.
func rerunPendingErr(err error) bool {
	var ee *ExecutionError
	return errors.As(err, &ee) && ee.Rerun && ee.rerunHere && errors.Is(ee.Kind, ErrUncertain)
}
