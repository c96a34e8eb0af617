package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// A waiter rides out a database restart: it keeps waiting and gets the
// lease once the holder lets go, without being restarted itself.
func TestLeaseWaitSurvivesDatabaseRestart(t *testing.T) {
	ctx := ctxT(t)
	cl, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Skipf("no local PostgreSQL binaries for a private cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	newClient := func() *sentinel.Client {
		p, err := pgxpool.New(ctx, cl.URL())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		c, err := sentinel.New(p, &sentinel.Config{DefaultTTL: time.Second, WaitRecheck: 100 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	a, b := newClient(), newClient()
	require.NoError(t, a.Migrate(ctx))
	held, err := a.Lease(ctx, "singleton")
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := b.Lease(wctx, "singleton", sentinel.WithWait())
		if err == nil && l.Token() <= held.Token() {
			err = context.Canceled
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // the waiter is waiting
	require.NoError(t, cl.Stop(ctx, "immediate"))
	time.Sleep(1500 * time.Millisecond) // longer than the TTL: the holder loses it
	select {
	case err := <-got:
		t.Fatalf("the waiter gave up while the database was down: %v", err)
	default:
	}
	require.NoError(t, cl.Start(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never got the lease after the restart")
	}
	<-held.Done()
	require.ErrorIs(t, held.Err(), sentinel.ErrLeaseLost)
}
