package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An attempt under WithRerun that stops without an outcome while attempts
// remain (fn's error here; a panic or a lost lease alike) leaves the key to
// the next caller with WithRerun: its caller's error still matches
// ErrUncertain, but says Rerun, the Observer counts rerun_pending (not the
// uncertain outcome operators are told to alert on) and the log is Info,
// not the Warn that asks a person to reconcile it. The last attempt, and a
// key without WithRerun, stay uncertain. A caller without WithRerun that
// finds the key waiting for its re-run is told Rerun too.
func TestRerunPendingIsNoPage(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, logs, last := observedClient(e)
	fails := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	rerunOf := func(err error) bool {
		var ee *sentinel.ExecutionError
		require.ErrorAs(t, err, &ee)
		return ee.Rerun
	}

	_, err := sentinel.Once(ctx, c, "pay", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.True(t, rerunOf(err), "attempt 1 of 2: %v", err)
	require.NotContains(t, err.Error(), "reconcile it", "whoever reads the error in a log is not sent to reconcile it")
	require.Contains(t, err.Error(), "no operator is needed")
	require.Equal(t, sentinel.OutcomeRerunPending, last())
	require.Contains(t, logs.String(), "the next Once call with WithRerun runs it again")
	require.NotContains(t, logs.String(), "reconcile it")
	uncertain, _, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true})
	require.NoError(t, err)
	require.Empty(t, uncertain, "the operator's list agrees")

	_, err = sentinel.Once(ctx, c, "pay", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrUncertain, "a caller without WithRerun does not run it")
	require.True(t, rerunOf(err), "but is told a caller with WithRerun will: %v", err)
	require.Equal(t, sentinel.OutcomeRerunPending, last())

	_, err = sentinel.Once(ctx, c, "pay", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, rerunOf(err), "the last attempt: %v", err)
	require.Contains(t, err.Error(), "reconcile it")
	require.Equal(t, sentinel.OutcomeUncertain, last())
	require.Contains(t, logs.String(), "execution outcome uncertain; reconcile it")

	_, err = sentinel.Once(ctx, c, "plain", fails)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, rerunOf(err))
	require.Equal(t, sentinel.OutcomeUncertain, last())
	_, err = sentinel.Once(ctx, c, "plain", fails)
	require.False(t, rerunOf(err))
	require.Equal(t, sentinel.OutcomeUncertain, last())
}

// A re-run that hands the key back on its last attempt (fn's Retryable
// error, as the idempotency middleware's NoEffect returns; or a claim
// given back because its caller's ctx ended before fn ran) leaves it
// executing with its lease ended, for a re-run that no caller may make: an
// earlier attempt may have had its effect, so the key is uncertain, and
// its caller must hear so. It got fn's Retryable error (ShouldRetry: true,
// Observer: retryable, no log) or its ctx's error (Observer: error), so
// the uncertain key an operator has to reconcile never raised the alert
// docs/operating.md recommends.
func TestRerunLastAttemptHandedBackIsUncertain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, logs, last := observedClient(e)
	warns := func() int { return strings.Count(logs.String(), "execution outcome uncertain; reconcile it") }
	fails := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	errDeclined := errors.New("card network unreachable: nothing sent")
	declines := func(context.Context) (int, error) { return 0, sentinel.Retryable(errDeclined) }
	requireUncertainForAll := func(key string) {
		t.Helper()
		ex, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		require.Equal(t, sentinel.StateExecuting, ex.State)
		require.False(t, ex.Rerunnable(), "%+v", ex)
		_, err = sentinel.Once(ctx, c, key, func(context.Context) (int, error) { t.Error("fn ran"); return 0, nil }, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}

	// Attempts left: the Retryable re-run leaves the key to the next
	// re-run, and its caller gets fn's error, as documented.
	_, err := sentinel.Once(ctx, c, "left", fails, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "left", declines, sentinel.WithRerun(3))
	require.ErrorIs(t, err, errDeclined)
	require.NotErrorIs(t, err, sentinel.ErrUncertain)
	require.True(t, sentinel.ShouldRetry(err))
	require.Equal(t, sentinel.OutcomeRetryable, last())

	// The last attempt: the key is uncertain, and so is the call.
	_, err = sentinel.Once(ctx, c, "spent", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Zero(t, warns())
	_, err = sentinel.Once(ctx, c, "spent", declines, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain, "%v", err)
	require.ErrorIs(t, err, errDeclined, "fn's error is kept")
	require.False(t, sentinel.ShouldRetry(err), "a retry gets ErrUncertain")
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.False(t, ee.Rerun)
	require.Equal(t, sentinel.OutcomeUncertain, last())
	require.Equal(t, 1, warns())
	requireUncertainForAll("spent")

	// A re-run claim given back before fn ran, on the last attempt.
	_, err = sentinel.Once(ctx, c, "gone", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sentinel.Once(cctx, c, "gone", func(context.Context) (int, error) { t.Error("fn ran"); return 0, nil }, sentinel.WithRerun(2))
	require.ErrorIs(t, err, context.Canceled, "the caller's ctx is kept")
	ex, ierr := c.Inspect(ctx, "gone")
	require.NoError(t, ierr)
	if ex.Attempt == 2 { // the claim went out and was given back (else: not claimed, nothing changed)
		require.ErrorIs(t, err, sentinel.ErrUncertain, "%v", err)
		require.Equal(t, sentinel.OutcomeUncertain, last())
		require.Equal(t, 2, warns())
		requireUncertainForAll("gone")
	}
}

// The same when the re-run claim of the last attempt lands as the client
// closes: it is given back without running fn, and the key is uncertain;
// the caller got ErrClosed alone.
func TestRerunLastAttemptClaimedAsTheClientClosesIsUncertain(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &hookTracer{match: "once_claim_packed"}
	c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.ConnConfig.Tracer = tr }), nil)
	_, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 0, errors.New("provider timed out") },
		sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	closeDuring(tr, c)
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { t.Error("fn ran"); return 0, nil }, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrClosed)
	other := e.client(nil)
	ex, ierr := other.Inspect(ctx, "k")
	require.NoError(t, ierr)
	require.Equal(t, 2, ex.Attempt, "the re-run was claimed: %v", err)
	require.False(t, ex.Rerunnable())
	require.ErrorIs(t, err, sentinel.ErrUncertain, "%v", err)
}

// observedClient is a client of e whose log (Info and above) is kept in
// logs, and last returns the outcome of its newest Once as its Observer
// saw it.
func observedClient(e *env) (c *sentinel.Client, logs *lockedBuffer, last func() sentinel.OnceOutcome) {
	var mu sync.Mutex
	var outcomes []sentinel.OnceOutcome
	logs = &lockedBuffer{}
	c = e.client(&sentinel.Config{
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Observer: &sentinel.Observer{OnceEnd: func(_ context.Context, ev sentinel.OnceEvent) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, ev.Outcome)
		}},
	})
	return c, logs, func() sentinel.OnceOutcome {
		mu.Lock()
		defer mu.Unlock()
		return outcomes[len(outcomes)-1]
	}
}
