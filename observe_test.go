package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestOnceOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		cached bool
		err    error
		want   sentinel.OnceOutcome
	}{
		{false, nil, sentinel.OutcomeRan},
		{true, nil, sentinel.OutcomeCached},
		{true, &sentinel.FinalError{Message: "declined"}, sentinel.OutcomeFinal},
		{false, &sentinel.ExecutionError{Kind: sentinel.ErrUncertain}, sentinel.OutcomeUncertain},
		{false, &sentinel.ExecutionError{Kind: sentinel.ErrInProgress}, sentinel.OutcomeInProgress},
		{false, &sentinel.ExecutionError{Kind: sentinel.ErrReconciling}, sentinel.OutcomeReconciling},
		{false, sentinel.Retryable(errors.New("busy")), sentinel.OutcomeRetryable},
		{false, fmt.Errorf("db: %w", errors.New("down")), sentinel.OutcomeError},
		{false, fmt.Errorf("%w: key completed, its result not stored", sentinel.ErrResultLost), sentinel.OutcomeResultLost},
		{true, fmt.Errorf("%w: decode", sentinel.ErrResult), sentinel.OutcomeError},
		{false, sentinel.ErrClosed, sentinel.OutcomeClosed},
		{false, sentinel.Retryable(fmt.Errorf("fn: %w", sentinel.ErrClosed)), sentinel.OutcomeRetryable},
		{false, &sentinel.ExecutionError{Kind: sentinel.ErrUncertain, Cause: sentinel.ErrClosed}, sentinel.OutcomeUncertain},
	} {
		require.Equal(t, tc.want, sentinel.OnceOutcomeOf(tc.cached, tc.err), "%v", tc.err)
	}
}

// An observer with only some funcs set: the others are skipped, and the
// set ones see every call with its namespace, key, token and outcome.
func TestObserverPartial(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var onces []sentinel.OnceEvent
	var losses []sentinel.LeaseLoss
	type ctxKey struct{}
	obs := &sentinel.Observer{
		OnceStart: func(ctx context.Context, ns, key string) context.Context {
			return context.WithValue(ctx, ctxKey{}, ns+"/"+key)
		},
		OnceEnd: func(ctx context.Context, ev sentinel.OnceEvent) {
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, ev.Namespace+"/"+ev.Key, ctx.Value(ctxKey{}))
			onces = append(onces, ev)
		},
		LeaseLost: func(l sentinel.LeaseLoss) {
			mu.Lock()
			defer mu.Unlock()
			losses = append(losses, l)
		},
	}
	c := e.client(&sentinel.Config{Observer: obs, Namespace: "obs"})
	var seen any
	res, err := sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) {
		seen = ctx.Value(ctxKey{})
		return 1, nil
	}, sentinel.WithNamespace("other"))
	require.NoError(t, err)
	require.Equal(t, "other/k", seen, "fn's context derives from OnceStart's")
	_, err = sentinel.OnceTx(ctx, c, "k", func(context.Context, pgx.Tx) (int, error) { return 0, nil }, sentinel.WithNamespace("other"))
	require.NoError(t, err)

	l, err := c.Lease(ctx, "lease", sentinel.WithTTL(time.Second))
	require.NoError(t, err)
	_, err = e.client(nil).Lease(ctx, "lease", sentinel.WithForce(), sentinel.WithNamespace("obs"))
	require.NoError(t, err)
	<-l.Done()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(losses) == 1 }, 5*time.Second, 10*time.Millisecond)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, onces, 2)
	require.Equal(t, sentinel.OnceEvent{Namespace: "other", Key: "k", Outcome: sentinel.OutcomeRan, Token: res.Token,
		Duration: onces[0].Duration}, onces[0])
	require.Positive(t, onces[0].Duration)
	require.Equal(t, sentinel.OutcomeCached, onces[1].Outcome)
	require.Equal(t, res.Token, onces[1].Token)
	require.Equal(t, "lease", losses[0].Key)
	require.Equal(t, l.Token(), losses[0].Token)
	require.False(t, losses[0].Execution)
	require.Equal(t, sentinel.LossLease, losses[0].Kind)
	require.ErrorIs(t, losses[0].Err, sentinel.ErrLeaseLost)
}

// A client closed while it held a turn reported a lease loss to the
// Observer (otelsentinel counted it in its lease losses) and logged a
// warning "lease ended", although Close gave the turn back as it releases
// a lease, for which it reports nothing: every clean shutdown of a process
// holding a turn looked like a loss.
func TestObserverCloseWithATurnIsNoLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var losses []sentinel.LeaseLoss
	obs := &sentinel.Observer{LeaseLost: func(l sentinel.LeaseLoss) {
		mu.Lock()
		defer mu.Unlock()
		losses = append(losses, l)
	}}
	var logs strings.Builder
	c := e.client(&sentinel.Config{Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	_, err := c.Lease(ctx, "k")
	require.NoError(t, err)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	c.Close()
	require.ErrorIs(t, tn.Err(), sentinel.ErrReleased, "Close released the turn, as it releases a lease")
	require.Zero(t, e.count("tickets", ""), "Close gave the turn back")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, losses, "a clean Close loses nothing")
	require.NotContains(t, logs.String(), "lease ended")
}
