package sentinel_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// backends counts the server connections whose application_name is name.
func backends(t *testing.T, name string) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", name).Scan(&n))
	return n
}

// Issue 30: 200 Turn waiters on one client whose pool has 4 connections
// hold at most 6 server connections while they wait (the pool's 4 and the
// process's one LISTEN connection), and are then served in ticket order,
// each handed its turn by its predecessor's release.
func TestTurnManyWaitersBoundedConnections(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	app := fmt.Sprintf("sentinel-bound-%d", time.Now().UnixNano())
	pool := e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	c := e.clientOn(pool, &sentinel.Config{DefaultTTL: 5 * time.Second})
	observer := e.client(nil)
	holder, err := c.Turn(ctx, "bounded")
	require.NoError(t, err)

	const waiters = 200
	var (
		mu    sync.Mutex
		order []int64
		wg    sync.WaitGroup
	)
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := c.Turn(ctx, "bounded")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, tn.Ticket())
			mu.Unlock()
			if err := tn.Release(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	most := 0
	waitFor(t, 60*time.Second, "200 waiters", func() bool {
		most = max(most, backends(t, app))
		q, err := observer.Queue(ctx, "bounded")
		require.NoError(t, err)
		return len(q.Waiting) == waiters
	})
	for range 20 { // a while of waiting
		most = max(most, backends(t, app))
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("at most %d server connections with %d waiters on a pool of 4", most, waiters)
	require.LessOrEqual(t, most, 6)

	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	require.Len(t, order, waiters)
	require.True(t, slices.IsSorted(order), "served out of ticket order")
	most = max(most, backends(t, app))
	require.LessOrEqual(t, most, 6)
	// Each waiter was handed its turn by the release before it.
	h, err := observer.QueueHistory(ctx, "bounded", 0, 10*waiters)
	require.NoError(t, err)
	granted := 0
	for _, ev := range h {
		if ev.Type == sentinel.QueueGranted {
			granted++
		}
	}
	require.Equal(t, waiters+1, granted)
}

// Clients of one process on one pool share one LISTEN connection: ten
// clients, each with a waiter, add one server connection, not ten, and
// every waiter is still woken by the release it waits for.
func TestClientsOnOnePoolShareOneListener(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	app := fmt.Sprintf("sentinel-hub-%d", time.Now().UnixNano())
	pool := e.pool(func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.RuntimeParams["application_name"] = app
	})
	const n = 10
	const ttl = 30 * time.Second // a missed wake-up would show as a wait of a TTL
	clients := make([]*sentinel.Client, n)
	for i := range clients {
		clients[i] = e.clientOn(pool, &sentinel.Config{DefaultTTL: ttl})
	}
	holder := e.client(&sentinel.Config{DefaultTTL: ttl})
	held := make([]*sentinel.Lease, n)
	for i := range held {
		l, err := holder.Lease(ctx, fmt.Sprintf("hub-%d", i))
		require.NoError(t, err)
		held[i] = l
	}
	got := make(chan time.Duration, n)
	var released [n]time.Time
	var rmu sync.Mutex
	for i, c := range clients {
		go func() {
			l, err := c.Lease(ctx, fmt.Sprintf("hub-%d", i), sentinel.WithWait())
			if err != nil {
				t.Error(err)
				got <- -1
				return
			}
			rmu.Lock()
			d := time.Since(released[i])
			rmu.Unlock()
			got <- d
			_ = l.Release(ctx)
		}()
	}
	waitFor(t, 30*time.Second, "every waiter counted in", func() bool {
		return e.count("leases", "key LIKE 'hub-%' AND waiters > 0") == n
	})
	conns := backends(t, app)
	t.Logf("%d clients with a waiter each on one pool: %d server connections", n, conns)
	require.LessOrEqual(t, conns, 4+1)
	for i, l := range held {
		rmu.Lock()
		released[i] = time.Now()
		rmu.Unlock()
		require.NoError(t, l.Release(ctx))
	}
	for range n {
		d := <-got
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, ttl/2, "a waiter slept until the holder's expiry: its wake-up was lost")
	}
}
