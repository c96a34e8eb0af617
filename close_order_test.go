package sentinel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// afterStatement runs a hook once a statement whose SQL contains a marker
// has returned (its commit done), before the client sees the result.
type afterStatement struct {
	marker string
	hook   func()
}

type afterStatementKey struct{}

func (a *afterStatement) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, afterStatementKey{}, strings.Contains(d.SQL, a.marker))
}

func (a *afterStatement) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if hit, _ := ctx.Value(afterStatementKey{}).(bool); hit && a.hook != nil {
		a.hook()
	}
}

// Close released its leases, then closed their Done: a closing process
// paused between the two (here: the statement's trace hook, standing for a
// descheduled process) let another client take the key while the first
// holder's Done was still open and its Err nil, so work running under
// lease.Context went on beside the new holder. Done now closes before the
// release statement runs, as it does for turns and executions; a lease
// Close could not free is still reported lost.
func TestCloseEndsLeasesBeforeTheKeyCanPassOn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	tr := &afterStatement{marker: "AS v(ns, key, token)"} // sqlReleaseMany, Close's release
	a := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), &sentinel.Config{DefaultTTL: time.Minute})
	b := e.client(nil)
	l, err := a.Lease(ctx, "closing")
	require.NoError(t, err)
	forced, err := a.Lease(ctx, "forced")
	require.NoError(t, err)
	// An operator takes "forced" over: Close's release will not find it.
	op, err := b.Lease(ctx, "forced", sentinel.WithForce())
	require.NoError(t, err)

	var (
		taken      bool
		doneClosed bool
	)
	tr.hook = func() {
		l2, err := b.Lease(ctx, "closing")
		if err == nil {
			taken = true
			defer func() { _ = l2.Release(ctx) }()
		}
		select {
		case <-l.Done():
			doneClosed = true
		default:
		}
	}
	a.Close()
	require.True(t, taken, "b takes the key once Close's release committed")
	require.True(t, doneClosed, "a's Done was still open when b held the key")
	require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, forced.Err(), sentinel.ErrLeaseLost, "a lease Close did not free is reported lost")
	require.NoError(t, op.Release(ctx))
}
