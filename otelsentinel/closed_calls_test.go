package otelsentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// Client.Close ends the Lease waits under way (they return ErrClosed),
// and calls made after it return ErrClosed: the process is shutting
// down, nothing failed. They count as sentinel.result / sentinel.outcome
// "closed", their spans not errors. Before, they counted as "error" with
// status Error, beside database failures, so every deploy that closed a
// client with a waiter raised the error rate an SRE alerts on.
func TestCallsEndedByCloseAreClosed(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	a := w.client(nil)
	b := w.client(nil)
	held, err := a.Lease(ctx, "job", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() { _, err := b.Lease(ctx, "job", sentinel.WithWait()); waited <- err }()
	require.Eventually(t, func() bool { // b waits
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT waiters FROM "+pgx.Identifier{w.schema, "leases"}.Sanitize()+
			" WHERE key = 'job'").Scan(&n))
		return n == 1
	}, 10*time.Second, 10*time.Millisecond)
	b.Close()
	require.ErrorIs(t, <-waited, sentinel.ErrClosed)
	_, err = b.Lease(ctx, "other")
	require.ErrorIs(t, err, sentinel.ErrClosed)
	_, err = sentinel.Once(ctx, b, "k", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.NoError(t, held.Release(ctx))

	m := w.metrics()
	require.Equal(t, map[string]int64{"acquired/false": 1, "closed/true": 1, "closed/false": 1},
		sumBy2(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrResult, otelsentinel.AttrWait))
	require.Equal(t, map[string]int64{"closed": 1}, sumBy(t, m["sentinel.once.calls"], otelsentinel.AttrOutcome))
	for _, s := range w.spans.Ended() {
		require.Equal(t, codes.Unset, s.Status().Code, "%s %v", s.Name(), s.Attributes())
	}
}
