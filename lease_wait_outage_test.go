package sentinel_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A WithWait that had seen the key held, then lost the database (its
// connections ended, new ones refused), and was cut short by its ctx
// during the outage returned "...: context canceled (last error: ...)"
// without its last holder, so it did not match ErrNotAcquired, which
// Lease's godoc and docs/leases.md promise when someone held the key. It
// now carries both.
func TestLeaseWaitCutDuringAnOutageMatchesNotAcquired(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(nil)
	l, err := holder.Lease(ctx, "press", sentinel.WithTTL(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })

	var down atomic.Bool
	app := "outage-" + strings.ReplaceAll(e.schema, "_", "-")
	p := e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["application_name"] = app
		dial := c.ConnConfig.DialFunc
		c.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if down.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused (test outage)")}
			}
			return dial(ctx, network, addr)
		}
	})
	logs := &lockedBuffer{}
	waiter := e.clientOn(p, &sentinel.Config{WaitRecheck: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lease(wctx, "press", sentinel.WithWait(), sentinel.WithTTL(2*time.Second))
		errc <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool { return e.count("lease_waiters", "key = 'press'") == 1 })

	down.Store(true)
	_, err = admin.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity WHERE application_name = $1", app)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "the waiter to meet the outage", func() bool {
		return strings.Contains(logs.String(), "database unreachable; retrying")
	})
	cancel()
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end with its ctx")
	}
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, sentinel.ErrNotAcquired, "someone held the key: %v", err)
	var held *sentinel.HeldError
	require.ErrorAs(t, err, &held)
	require.NotNil(t, held.Holder)
	require.Equal(t, l.Token(), held.Holder.Token)
}
