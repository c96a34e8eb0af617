package sentinel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// QueueGrant.Ahead is "live tickets ahead of it when it was drawn". Two
// draws that wait for the queue's lock together: the second is drawn
// behind the first (its draw reads that ticket ahead, under the lock, and
// it waits for it), so one ticket was ahead of it. The count is made in
// the draw's statement, whose snapshot was taken before it waited for the
// lock, and so missed the first ticket; queue_draw (migration 020) counts
// under the lock.
func TestQueueGrantCountsATicketDrawnWhileTheDrawWaitedForTheLock(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var grants []sentinel.QueueGrant
	observed := e.client(&sentinel.Config{Observer: &sentinel.Observer{
		QueueGranted: func(g sentinel.QueueGrant) { mu.Lock(); grants = append(grants, g); mu.Unlock() },
	}})
	plain := e.client(nil)
	first, err := plain.Turn(ctx, "printer") // creates the queue's row
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'printer' FOR NO KEY UPDATE")
	require.NoError(t, err)
	waiters := func(n int) {
		require.Eventually(t, func() bool {
			var got int
			err := admin.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity
				WHERE wait_event_type = 'Lock' AND query LIKE '%`+e.schema+`%'`).Scan(&got)
			return err == nil && got == n
		}, 5*time.Second, time.Millisecond)
	}
	ahead := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := plain.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		ahead <- tn
	}()
	waiters(1)
	behind := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := observed.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		behind <- tn
	}()
	waiters(2)
	require.NoError(t, tx.Commit(ctx))
	a := <-ahead
	require.NotNil(t, a)
	waitTickets(t, plain, "printer", 2)
	require.NoError(t, a.Release(ctx))
	b := <-behind
	require.NotNil(t, b)
	require.Greater(t, b.Ticket(), a.Ticket())
	require.NoError(t, b.Release(ctx))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, grants, 1)
	require.Equal(t, 1, grants[0].Ahead, "the ticket drawn while this draw waited for the lock was ahead of it")
}
