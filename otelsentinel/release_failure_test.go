package otelsentinel_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// A release whose statement fails (the database unreachable for a moment,
// as during a deploy over a database blip) is no loss: the holder was done
// with the lease, and nobody else held the key while it worked. Before,
// Lease.Release, Turn.Release and Client.Close reported such a lease to
// Observer.LeaseLost, so sentinel.lease.losses, which docs/operating.md
// pages on, counted three losses that were not losses. They are counted on
// sentinel.lease.release_failures now.
func TestFailedReleaseIsNoLoss(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	app := "otel-release-" + w.schema
	var blocked atomic.Bool
	pc, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pc.BeforeConnect = func(context.Context, *pgx.ConnConfig) error {
		if blocked.Load() {
			return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("network down (test)")}
		}
		return nil
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: w.schema, Observer: w.obs, DefaultTTL: time.Minute,
		ReleaseTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(c.Close)

	l, err := c.Lease(ctx, "deploy")
	require.NoError(t, err)
	turn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	atClose, err := c.Lease(ctx, "held-at-close")
	require.NoError(t, err)

	blocked.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	require.NoError(t, err)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	require.Error(t, l.Release(rctx), "the release statement cannot reach the database")
	require.Error(t, turn.Release(rctx), "the leave cannot reach the database")
	c.Close() // its release of atClose fails too
	require.ErrorIs(t, atClose.Err(), sentinel.ErrLeaseLost, "Close could not free it")

	m := w.metrics()
	require.Nil(t, m["sentinel.lease.losses"], "a failed release is not a loss")
	require.NotNil(t, m["sentinel.lease.release_failures"])
	require.Equal(t, map[string]int64{"lease": 2, "ticket": 1},
		sumBy(t, m["sentinel.lease.release_failures"], otelsentinel.AttrLeaseKind))
	require.Equal(t, map[string]int64{"default": 3},
		sumBy(t, m["sentinel.lease.release_failures"], otelsentinel.AttrNamespace))
}
