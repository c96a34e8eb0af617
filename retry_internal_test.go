package sentinel

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeTime is an injected clock: sleeping advances it and records delays.
type fakeTime struct {
	now    time.Time
	slept  []time.Duration
	cancel func() // called on the n-th sleep when set
	at     int
}

func (f *fakeTime) opts(o RetryOptions, r float64) RetryOptions {
	f.now = time.Unix(1_000_000, 0)
	o.now = func() time.Time { return f.now }
	o.rand = func() float64 { return r }
	o.sleep = func(ctx context.Context, d time.Duration) error {
		f.slept = append(f.slept, d)
		f.now = f.now.Add(d)
		if f.cancel != nil && len(f.slept) == f.at {
			f.cancel()
		}
		return ctx.Err()
	}
	return o
}

func TestBackoffFullJitterBounds(t *testing.T) {
	o, err := RetryOptions{BaseDelay: 10 * time.Millisecond, MaxDelay: 300 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	caps := []time.Duration{10, 20, 40, 80, 160, 300, 300}
	for n, want := range caps {
		want *= time.Millisecond
		o.rand = func() float64 { return 0.999999 }
		if got := o.backoff(n + 1); got > want || got < want*99/100 {
			t.Fatalf("retry %d: near-max delay %s, cap %s", n+1, got, want)
		}
		o.rand = func() float64 { return 0 }
		if got := o.backoff(n + 1); got != 0 {
			t.Fatalf("retry %d: min delay %s, want 0 (full jitter)", n+1, got)
		}
	}
	// No overflow however many retries.
	o.rand = func() float64 { return 0.5 }
	if got := o.backoff(1000); got != 150*time.Millisecond {
		t.Fatalf("retry 1000: %s", got)
	}
}

func TestRetryMaxAttempts(t *testing.T) {
	f := &fakeTime{}
	calls := 0
	var retries []int
	o := f.opts(RetryOptions{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second,
		OnRetry: func(n int, err error, d time.Duration) { retries = append(retries, n) }}, 0.5)
	inProgress := &ExecutionError{Kind: ErrInProgress, Key: "k"}
	err := Retry(context.Background(), o, func(context.Context) error {
		calls++
		if calls%2 == 0 {
			return inProgress
		}
		return Retryable(errors.New("busy"))
	})
	var re *RetryError
	if !errors.As(err, &re) || re.Attempts != 4 || calls != 4 || re.Reason != "MaxAttempts reached" || !errors.Is(err, ErrInProgress) {
		t.Fatalf("err %v (calls %d)", err, calls)
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	if fmt.Sprint(f.slept) != fmt.Sprint(want) || fmt.Sprint(retries) != "[1 2 3]" || re.Elapsed != 350*time.Millisecond {
		t.Fatalf("slept %v, OnRetry %v, elapsed %s", f.slept, retries, re.Elapsed)
	}
}

func TestRetryMaxElapsed(t *testing.T) {
	f := &fakeTime{}
	calls := 0
	o := f.opts(RetryOptions{MaxAttempts: -1, MaxElapsed: time.Second, BaseDelay: 100 * time.Millisecond, MaxDelay: 400 * time.Millisecond}, 1)
	err := Retry(context.Background(), o, func(context.Context) error { calls++; return Retryable(errors.New("x")) })
	var re *RetryError
	// Delays 100, 200, 400 (=700ms); the next 400 would end at 1.1s > 1s.
	if !errors.As(err, &re) || re.Reason != "MaxElapsed reached" || calls != 4 || re.Elapsed > time.Second {
		t.Fatalf("err %v, calls %d, slept %v", err, calls, f.slept)
	}
}

func TestRetryContextEnds(t *testing.T) {
	f := &fakeTime{}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.at = cancel, 2
	calls := 0
	err := Retry(ctx, f.opts(RetryOptions{MaxAttempts: 100}, 0.5), func(context.Context) error {
		calls++
		return Retryable(errors.New("x"))
	})
	var re *RetryError
	if !errors.As(err, &re) || re.Reason != "context done" || !errors.Is(err, context.Canceled) || calls != 2 {
		t.Fatalf("err %v, calls %d", err, calls)
	}
}

func TestRetryNeverRetriesFinalOutcomes(t *testing.T) {
	for _, e := range []error{
		nil,
		errors.New("plain failure"),
		&ExecutionError{Kind: ErrUncertain, Key: "k"},
		&ExecutionError{Kind: ErrReconciling, Key: "k"},
		// Uncertain wins even when the cause was marked retryable.
		&ExecutionError{Kind: ErrUncertain, Key: "k", Cause: Retryable(errors.New("x"))},
		invalid("key", "bad"),
		&FinalError{Key: "k", Message: "card declined"},
		// Final wins over Retryable.
		Final(Retryable(errors.New("declined"))),
	} {
		f := &fakeTime{}
		calls := 0
		err := Retry(context.Background(), f.opts(RetryOptions{}, 0.5), func(context.Context) error { calls++; return e })
		if err != e || calls != 1 || len(f.slept) != 0 {
			t.Fatalf("%v: returned %v after %d calls", e, err, calls)
		}
	}
	if !ShouldRetry(fmt.Errorf("wrapped: %w", Retryable(errors.New("x")))) || ShouldRetry(nil) {
		t.Fatal("ShouldRetry")
	}
}

// IsRetryable agrees with ShouldRetry on an error that is both fn's
// Retryable error and an uncertain, reconciling or final outcome (a
// Retryable fn whose key moved to reconciling, an OnceTx fn that closed
// its transaction, a re-run's last attempt): it said true, and code that
// asked it first (the HTTP recipe of docs/once.md) said "try again" for a
// key under review. fn's error stays reachable with errors.Is.
func TestIsRetryableFalseWhenARetryCannotHelp(t *testing.T) {
	fnErr := errors.New("gateway timeout before sending")
	for _, err := range []error{
		&ExecutionError{Kind: ErrUncertain, Key: "k", Cause: fmt.Errorf("last attempt: %w", Retryable(fnErr))},
		&ExecutionError{Kind: ErrReconciling, Key: "k", Cause: Retryable(fnErr)},
		Final(Retryable(fnErr)),
	} {
		if IsRetryable(err) || ShouldRetry(err) || !errors.Is(err, fnErr) {
			t.Fatalf("%v: IsRetryable %v, ShouldRetry %v, errors.Is(fn's error) %v", err, IsRetryable(err), ShouldRetry(err), errors.Is(err, fnErr))
		}
	}
	// The key moved on to another state (ErrWrongState): a retry replays
	// what it holds now, so it is retryable, as ShouldRetry says.
	moved := &ExecutionError{Kind: ErrWrongState, Key: "k", Cause: Retryable(fnErr)}
	if !IsRetryable(moved) || !ShouldRetry(moved) {
		t.Fatalf("%v: IsRetryable %v, ShouldRetry %v", moved, IsRetryable(moved), ShouldRetry(moved))
	}
}

func TestRetryBadOptions(t *testing.T) {
	for _, o := range []RetryOptions{
		{MaxAttempts: -1},
		{MaxElapsed: -time.Second},
		{BaseDelay: -time.Millisecond},
		{BaseDelay: time.Second, MaxDelay: time.Millisecond},
	} {
		called := false
		err := Retry(context.Background(), o, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, ErrInvalid) || called {
			t.Fatalf("%+v: %v (fn called %v)", o, err, called)
		}
	}
}
