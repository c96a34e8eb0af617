package sentinel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// listeners counts the server connections of application app that
// LISTEN (their last statement is the hub's LISTEN, sent again as its
// ping).
func listeners(t *testing.T, app string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'", app).Scan(&n))
	return n
}

// idleClient returns a client on a pool of its own whose connections are
// named by the returned application name, keeping its waiters asleep for
// a minute unless a notification wakes them (waitCfg), with the given
// ListenIdleTimeout.
func idleClient(t *testing.T, e *env, idle time.Duration) (*sentinel.Client, string) {
	t.Helper()
	app := fmt.Sprintf("sentinel-idle-%d", time.Now().UnixNano())
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	cfg := waitCfg
	cfg.ListenIdleTimeout = idle
	return e.clientOn(pool, &cfg), app
}

// idleWaiter is idleClient's client b waiting (waitingFor) for lease "k",
// which another client holds as l.
func idleWaiter(t *testing.T, e *env, idle time.Duration) (b *sentinel.Client, app string, l *sentinel.Lease, got <-chan error) {
	t.Helper()
	cfg := waitCfg
	l, err := e.client(&cfg).Lease(ctxT(t), "k")
	require.NoError(t, err)
	b, app = idleClient(t, e, idle)
	got, _ = waitingFor(t, e, b, "k")
	return b, app, l, got
}

// A process that stops waiting closes its LISTEN connection after
// Config.ListenIdleTimeout (so PostgreSQL no longer signals its backend
// on every other process's NOTIFY), and its next wait listens again, on a
// channel of its own, and is woken by the release.
func TestIdleListenerCloses(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := waitCfg
	a := e.client(&cfg)
	b, app := idleClient(t, e, 300*time.Millisecond)

	var channels []string
	for round := range 2 {
		key := fmt.Sprintf("k%d", round)
		l, err := a.Lease(ctx, key)
		require.NoError(t, err)
		got, ch := waitingFor(t, e, b, key)
		require.NotNil(t, ch, "round %d: the registration recorded no channel", round)
		channels = append(channels, *ch)
		require.Equal(t, 1, listeners(t, app), "round %d: the waiting process does not listen", round)
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		handedOver(t, got, released)
		require.Eventually(t, func() bool { return listeners(t, app) == 0 }, 10*time.Second, 20*time.Millisecond,
			"round %d: the idle process still listens", round)
		require.False(t, sentinel.Listening(b))
	}
	require.NotEqual(t, channels[0], channels[1], "the new connection listens on the retired one's channel")
}

// A process that waits longer than its ListenIdleTimeout keeps listening
// until its waiter is woken: idle means nothing waits.
func TestListenerStaysWhileWaiting(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, app, l, got := idleWaiter(t, e, 100*time.Millisecond)
	time.Sleep(1500 * time.Millisecond) // 15 timeouts
	require.Equal(t, 1, listeners(t, app), "the listener closed under a waiter")
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	handedOver(t, got, released)
}

// A negative ListenIdleTimeout keeps the connection until the client
// closes.
func TestListenIdleTimeoutNegative(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	b, app, l, got := idleWaiter(t, e, -1)
	released := time.Now()
	require.NoError(t, l.Release(ctx))
	handedOver(t, got, released)
	time.Sleep(2500 * time.Millisecond) // past the watcher's first checks
	require.Equal(t, 1, listeners(t, app), "the listener closed")
	b.Close()
	require.Eventually(t, func() bool { return listeners(t, app) == 0 }, 10*time.Second, 20*time.Millisecond)
}

// With a timeout of a millisecond the hub retires between, and races
// with, every wait and draw: a waiter must never be left on a retired
// hub (it would sleep for a minute: its re-checks and the holder's TTL
// are a minute). Lease waiters and turns, one after another and at once.
func TestIdleListenerRetiresBetweenWaits(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := waitCfg
	a := e.client(&cfg)
	b, _ := idleClient(t, e, time.Millisecond)
	for round := range 15 {
		key := fmt.Sprintf("k%d", round)
		l, err := a.Lease(ctx, key)
		require.NoError(t, err)
		got, ch := waitingFor(t, e, b, key)
		require.NotNil(t, ch)
		if round%3 == 0 {
			time.Sleep(5 * time.Millisecond) // let the watcher look at a waiting hub
		}
		released := time.Now()
		require.NoError(t, l.Release(ctx))
		handedOver(t, got, released)
	}
	// Turns: b's tickets wait behind a's, then behind each other.
	for round := range 10 {
		first, err := a.Turn(ctx, "printer")
		require.NoError(t, err)
		served := make(chan error, 3)
		for range 3 {
			go func() {
				tn, err := b.Turn(context.Background(), "printer")
				if err == nil {
					err = tn.Release(context.Background())
				}
				served <- err
			}()
		}
		require.Eventually(t, func() bool { return e.count("tickets", "resource = 'printer'") == 4 },
			5*time.Second, 2*time.Millisecond, "round %d: the turns never drew", round)
		released := time.Now()
		require.NoError(t, first.Release(ctx))
		for range 3 {
			select {
			case err := <-served:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Fatalf("round %d: a turn was not woken by the release ahead of it", round)
			}
		}
		require.Less(t, time.Since(released), 5*time.Second, "round %d: turns were not woken by the releases", round)
	}
}
