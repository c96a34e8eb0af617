package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A TTL of centuries was accepted: intervals that large wrap around when
// read back as a time.Duration (an elector's follower re-registered every
// millisecond with a 200-year TTL), and nothing a lease guards needs one.
// TTLs above MaxTTL are refused now, with ErrInvalid, before anything is
// written.
func TestTTLsAboveMaxTTLAreRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	huge := 200 * 365 * 24 * time.Hour
	c := e.client(nil)

	_, err := c.Lease(ctx, "k", sentinel.WithTTL(huge))
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Lease")
	require.ErrorContains(t, err, "MaxTTL")
	_, err = c.Lease(ctx, "k", sentinel.WithTTL(sentinel.MaxTTL+time.Second))
	require.ErrorIs(t, err, sentinel.ErrInvalid, "just above MaxTTL")
	_, err = c.Lease(ctx, "k", sentinel.WithHardTTL(huge))
	require.ErrorIs(t, err, sentinel.ErrInvalid, "hard TTL")
	_, err = c.Turn(ctx, "k", sentinel.WithTTL(huge))
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Turn")
	_, err = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil }, sentinel.WithTTL(huge))
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Once")
	_, err = c.Elector("g", sentinel.ElectorOptions{TTL: huge})
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Elector")
	_, err = sentinel.New(e.pool(nil), &sentinel.Config{Schema: e.schema, DefaultTTL: huge})
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Config.DefaultTTL")
	_, err = sentinel.New(e.pool(nil), &sentinel.Config{Schema: e.schema, OnceHardTTL: huge})
	require.ErrorIs(t, err, sentinel.ErrInvalid, "Config.OnceHardTTL")

	require.Zero(t, e.count("leases", ""), "nothing written")
	require.Zero(t, e.count("tickets", ""), "nothing written")
	require.Zero(t, e.count("executions", ""), "nothing written")

	l, err := c.Lease(ctx, "k", sentinel.WithTTL(sentinel.MaxTTL))
	require.NoError(t, err, "MaxTTL itself is accepted")
	require.NoError(t, l.Release(ctx))
}
