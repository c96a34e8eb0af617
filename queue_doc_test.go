package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Checks of statements the queue's documentation makes (sqlDraw,
// docs/queue.md) against real runs.

// A draw sent while Prune (sqlPruneQueuesLock, sqlPruneQueues) has locked
// and deleted the resource's queue row, without tickets, waits for Prune's
// commit in its INSERT ... ON CONFLICT (sqlDraw's ins), then creates the
// row anew and draws on it: the Turn is served by that one statement.
func TestDrawWhilePruneDeletesTheQueueRow(t *testing.T) {
	e := newEnv(t)
	c, log := queueLoggedClient(t, e, &sentinel.Config{DefaultTTL: 30 * time.Second})
	ctx := ctxT(t)

	first, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.NoError(t, first.Release(ctx))
	log.take()

	// Prune's two steps, held open: the queue row, without tickets, is
	// locked and deleted.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'printer' FOR UPDATE")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'printer'")
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		turn, err := c.Turn(ctx, "printer")
		if err == nil {
			err = turn.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		return admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%queue_draw(%'`).Scan(&n) == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond, "the draw waits for the queue row's lock")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-got)
	require.Equal(t, []string{"draw"}, log.take(), "the draw re-creates the queue row Prune deleted")
}

// QueueStatus.Holder: a holder's ServedAt is zero only while its own
// serving check is due. The leave ahead does not grant a ticket below which
// a dead ticket is locked elsewhere (a VerifyTurn guard, here): the ticket
// is the holder, unserved, and is served by its serving check once the
// guard ends.
func TestLeaveDoesNotGrantPastADeadTicketLockedElsewhere(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})

	held, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	var dead int64
	require.NoError(t, admin.QueryRow(ctx, "INSERT INTO "+e.table("tickets")+
		` (namespace, resource, ticket, owner, drawn_at, expires_at) VALUES
		('default', 'printer', nextval('`+e.schema+`.fencing_token'), 'gone', pg_catalog.now(), pg_catalog.now() - interval '1 s')
		RETURNING ticket`).Scan(&dead))
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("tickets")+" WHERE ticket = $1 FOR KEY SHARE", dead)
	require.NoError(t, err)

	got := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := c.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		got <- tn
	}()
	waitTickets(t, c, "printer", 2)
	require.NoError(t, held.Release(ctx))

	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "printer")
		return err == nil && q.Holder != nil && q.Holder.Ticket > dead
	}, 5*time.Second, 2*time.Millisecond)
	q, err := c.Queue(ctx, "printer")
	require.NoError(t, err)
	require.True(t, q.Holder.ServedAt.IsZero(), "not granted by the leave: a dead ticket below it is locked")
	select {
	case tn := <-got:
		t.Fatalf("Turn returned ticket %d while a dead ticket below it was locked", tn.Ticket())
	case <-time.After(200 * time.Millisecond):
	}

	require.NoError(t, tx.Rollback(ctx))
	tn := <-got
	require.NotNil(t, tn)
	q, err = c.Queue(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, tn.Ticket(), q.Holder.Ticket)
	require.False(t, q.Holder.ServedAt.IsZero(), "served by its own serving check")
	require.NoError(t, tn.Release(ctx))
}
