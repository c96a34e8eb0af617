package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An attempt under WithRerun loses its lease while its process lives (a
// freeze, a stalled network) and a re-run takes the key over; then the
// first attempt's fn returns. Its caller was told the key was uncertain,
// "to be run again by the next Once call" and "Reconcile the key, then
// ForceComplete it", while the re-run had already completed it (or was
// running it). It now gets what a new call would: the re-run's stored
// result, Cached, or ErrInProgress while the re-run runs.
func TestRerunSupersededAttemptGetsTheKeysOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	opts := []sentinel.Option{sentinel.WithRerun(3), sentinel.WithTTL(400 * time.Millisecond), sentinel.WithHardTTL(800 * time.Millisecond)}

	for _, tc := range []struct {
		name         string
		fnErr        bool // attempt 1's fn returns its ctx's error, not a value
		rerunRunning bool // attempt 1 returns while the re-run runs
	}{
		{"value/rerun-completed", false, false},
		{"ctx-error/rerun-completed", true, false},
		{"value/rerun-running", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "pay-" + tc.name
			lost, back, rerunIn, rerunGo := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
			type outcome struct {
				res sentinel.Result[string]
				err error
			}
			first := make(chan outcome, 1)
			go func() {
				res, err := sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
					<-ctx.Done() // the lease is lost (hard TTL)
					close(lost)
					<-back
					if tc.fnErr {
						return "", ctx.Err()
					}
					return "ch_1", nil
				}, opts...)
				first <- outcome{res, err}
			}()
			<-lost
			waitLeaseExpired(t, c, key)
			second := make(chan outcome, 1)
			go func() {
				res, err := sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
					require.Equal(t, 2, sentinel.Attempt(ctx))
					close(rerunIn)
					<-rerunGo
					return "ch_1", nil
				}, opts...)
				second <- outcome{res, err}
			}()
			<-rerunIn
			if !tc.rerunRunning {
				close(rerunGo)
				require.NoError(t, (<-second).err)
			}
			close(back)
			got := <-first
			if tc.rerunRunning {
				require.ErrorIs(t, got.err, sentinel.ErrInProgress, "the re-run holds the key: %v", got.err)
				require.NotErrorIs(t, got.err, sentinel.ErrUncertain)
				close(rerunGo)
				require.NoError(t, (<-second).err)
				return
			}
			require.NoError(t, got.err, "the re-run completed the key")
			require.True(t, got.res.Cached)
			require.Equal(t, "ch_1", got.res.Value)
			ex, err := c.Inspect(ctx, key)
			require.NoError(t, err)
			require.Equal(t, sentinel.StateCompleted, ex.State)
			require.Equal(t, ex.Token, got.res.Token, "the token of the attempt that completed it")
		})
	}
}

// The same attempt, but no re-run has come yet when fn returns success:
// the caller gets ErrUncertain with Rerun ("no operator is needed"), and
// the message's body said "Reconcile the key, then ForceComplete it with
// that result", steps that would stop the re-run the headline promises.
// It now says the next caller with WithRerun runs fn again, and gives the
// operator's steps only when no re-run is left.
func TestRerunPendingRefusedCompletionSendsNoOperator(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	for _, tc := range []struct {
		max   int
		rerun bool
	}{{3, true}, {1, false}} {
		key := "pay-" + time.Now().Format("150405.000000")
		_, err := sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
			<-ctx.Done() // the lease is lost (hard TTL)
			waitLeaseExpired(t, c, key)
			return "ch_1", nil
		}, sentinel.WithRerun(tc.max), sentinel.WithTTL(400*time.Millisecond), sentinel.WithHardTTL(800*time.Millisecond))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
		var ee *sentinel.ExecutionError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, tc.rerun, ee.Rerun, "%v", err)
		require.Contains(t, err.Error(), "completion_refused")
		if tc.rerun {
			require.Contains(t, err.Error(), "no operator is needed")
			require.Contains(t, err.Error(), "runs fn again, as attempt 2 of at most 3")
			require.NotContains(t, err.Error(), "Reconcile the key", "%v", err)
			require.NotContains(t, err.Error(), "ForceComplete", "%v", err)
		} else {
			require.Contains(t, err.Error(), "Reconcile the key, then ForceComplete it with that result", "%v", err)
		}
	}
}

// The same superseded attempt, but its fn returns Retryable ("nothing
// happened") after the re-run took the key over. Its caller got an
// ExecutionError matching ErrWrongState, "the key moved on while fn ran
// ... so it was not released for the next caller", the error of an
// operator's step refused, where Once's godoc promises a superseded
// attempt what a new call would get: the re-run's result, Cached, or
// ErrInProgress while it runs.
func TestRerunSupersededRetryableAttemptGetsTheKeysOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond})
	opts := []sentinel.Option{sentinel.WithRerun(3), sentinel.WithTTL(400 * time.Millisecond), sentinel.WithHardTTL(800 * time.Millisecond)}
	// The re-run must not lose its own lease while the test holds it in
	// fn or completes it: with the first attempt's short TTLs it did, on
	// a loaded machine ("renewal deadline passed"), and its completion
	// was refused. Only the first attempt's lease is meant to be lost.
	rerunOpts := []sentinel.Option{sentinel.WithRerun(3), sentinel.WithTTL(time.Minute)}

	for _, rerunRunning := range []bool{false, true} {
		key := fmt.Sprintf("pay-retryable-%v", rerunRunning)
		lost, back, rerunIn, rerunGo := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		type outcome struct {
			res sentinel.Result[string]
			err error
		}
		first := make(chan outcome, 1)
		go func() {
			res, err := sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
				<-ctx.Done() // the lease is lost (hard TTL)
				close(lost)
				<-back
				return "", sentinel.Retryable(errors.New("gateway not reached"))
			}, opts...)
			first <- outcome{res, err}
		}()
		<-lost
		waitLeaseExpired(t, c, key)
		second := make(chan outcome, 1)
		go func() {
			res, err := sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
				close(rerunIn)
				<-rerunGo
				return "ch_1", nil
			}, rerunOpts...)
			second <- outcome{res, err}
		}()
		<-rerunIn
		if !rerunRunning {
			close(rerunGo)
			require.NoError(t, (<-second).err)
		}
		close(back)
		got := <-first
		require.NotErrorIs(t, got.err, sentinel.ErrWrongState, "rerun running %v: %v", rerunRunning, got.err)
		if rerunRunning {
			require.ErrorIs(t, got.err, sentinel.ErrInProgress, "the re-run holds the key: %v", got.err)
			close(rerunGo)
			require.NoError(t, (<-second).err)
			continue
		}
		require.NoError(t, got.err, "the re-run completed the key")
		require.True(t, got.res.Cached)
		require.Equal(t, "ch_1", got.res.Value)
	}
}

// The refused completion of an attempt with re-runs left, and of one a
// re-run superseded, is logged at Info, not as the Warn "completion
// refused; the key is uncertain": the key is not uncertain (the next
// caller with WithRerun runs fn again, or a re-run already took it over),
// and WithRerun promises no page for a failure the provider absorbs. The
// last attempt's refused completion (here: without WithRerun) still warns.
func TestRerunRefusedCompletionLogsNoUncertainKey(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	logs := &lockedBuffer{}
	c := e.client(&sentinel.Config{SafetyMargin: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	frozen := func(key string, superseded bool) func(context.Context) (string, error) {
		return func(ctx context.Context) (string, error) {
			<-ctx.Done() // the lease is lost (hard TTL)
			waitLeaseExpired(t, c, key)
			if superseded {
				other := e.client(nil)
				res, err := sentinel.Once(context.WithoutCancel(ctx), other, key,
					func(context.Context) (string, error) { return "ch_1", nil }, sentinel.WithRerun(3))
				require.NoError(t, err)
				require.False(t, res.Cached)
			}
			return "ch_1", nil
		}
	}
	for _, tc := range []struct {
		key        string
		max        int
		superseded bool
		warn       bool
	}{{"pending", 3, false, false}, {"superseded", 3, true, false}, {"last", 1, false, true}} {
		before := len(logs.String())
		res, err := sentinel.Once(ctx, c, tc.key, frozen(tc.key, tc.superseded),
			sentinel.WithRerun(tc.max), sentinel.WithTTL(400*time.Millisecond), sentinel.WithHardTTL(800*time.Millisecond))
		if tc.superseded {
			require.NoError(t, err) // the re-run's result
			require.True(t, res.Cached)
		} else {
			require.ErrorIs(t, err, sentinel.ErrUncertain)
		}
		got := logs.String()[before:]
		require.Contains(t, got, "completion refused", tc.key)
		require.Equal(t, tc.warn, strings.Contains(got, "level=WARN msg=\"sentinel: completion refused; the key is uncertain\""), "%s:\n%s", tc.key, got)
		if !tc.warn {
			require.Contains(t, got, "level=INFO msg=\"sentinel: completion refused", "%s:\n%s", tc.key, got)
			require.NotContains(t, got, "the key is uncertain", "%s:\n%s", tc.key, got)
		}
	}
}
