package sentinel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// queueLog records a pool's queue statements sent one at a time: "draw"
// and "serve" (the serving check); other statements (and the leave, a
// batch) are not recorded.
type queueLog struct {
	mu   sync.Mutex
	sent []string
}

func (s *queueLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	kind := ""
	switch q := d.SQL; {
	case strings.Contains(q, "queue_draw("):
		kind = "draw"
	case strings.Contains(q, "mw AS (SELECT me.label"):
		kind = "serve"
	}
	if kind != "" {
		s.mu.Lock()
		s.sent = append(s.sent, kind)
		s.mu.Unlock()
	}
	return ctx
}

func (s *queueLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *queueLog) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

// queueLoggedClient is a client whose queue statements are recorded, with
// its process's LISTEN already running (started by a Turn's draw), as it
// is in a worker past its first turn.
func queueLoggedClient(t *testing.T, e *env, cfg *sentinel.Config) (*sentinel.Client, *queueLog) {
	t.Helper()
	log := &queueLog{}
	c := e.clientOn(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = log }), cfg)
	warm, err := c.Turn(ctxT(t), "warm-up-"+uuid.NewString()[:8])
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctxT(t)))
	require.Eventually(t, func() bool { return sentinel.Listening(c) }, 5*time.Second, time.Millisecond,
		"the first draw starts the client's LISTEN hub")
	log.take()
	return c, log
}

// twoQueueClients returns a fresh env and two of its clients on pools of
// their own (so hubs of their own), tickets living 30 s: a ticket that
// left is only ever noticed by a wake-up, never by its expiry, within a
// test's time.
func twoQueueClients(t *testing.T) (*env, *sentinel.Client, *queueLog, *sentinel.Client, *queueLog) {
	t.Helper()
	e := newEnv(t)
	cfg := &sentinel.Config{DefaultTTL: 30 * time.Second}
	a, logA := queueLoggedClient(t, e, cfg)
	b, logB := queueLoggedClient(t, e, cfg)
	return e, a, logA, b, logB
}

// waitTickets waits until resource has n live tickets.
func waitTickets(t *testing.T, c *sentinel.Client, resource string, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctxT(t), resource)
		return err == nil && q.Holder != nil && len(q.Waiting) == n-1
	}, 5*time.Second, 2*time.Millisecond)
}

// Issue 30: a ticket drawn behind a live ticket sleeps at once: the draw
// read the ticket ahead under the queue's lock, and the leave ahead grants
// it ('s'), so its whole wait is one statement, the draw. A ticket with
// nobody ahead is served by its draw.
func TestTurnBehindALiveTicketSleepsWithoutAServingCheck(t *testing.T) {
	_, a, logA, b, logB := twoQueueClients(t)
	ctx := ctxT(t)

	held, err := a.Turn(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, []string{"draw"}, logA.take(), "a ticket with nobody ahead")

	got := make(chan *sentinel.Turn, 1)
	go func() {
		tb, err := b.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		got <- tb
	}()
	waitTickets(t, a, "printer", 2)
	require.NoError(t, held.Release(ctx))
	var tb *sentinel.Turn
	select {
	case tb = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the ticket behind was not served within 5 s of the release (its ticket ahead had 30 s left)")
	}
	require.NotNil(t, tb)
	require.Greater(t, tb.Ticket(), held.Ticket())
	require.Equal(t, []string{"draw"}, logB.take(), "a ticket behind a live one: the draw, then the grant's wake-up")
	require.NoError(t, tb.Release(ctx))
}

// A leave may grant a ticket, and its wake-up reach the process, after the
// draw committed but before the waiter subscribed to the ticket's number
// (it learns the number from the draw). The hub keeps it for the draw's
// window, so the waiter returns on it: without that it would sleep until
// the ticket ahead, released, expired (30 s).
func TestTurnGrantedBeforeItsWaiterSubscribedIsNotMissed(t *testing.T) {
	_, a, _, b, logB := twoQueueClients(t)
	ctx := ctxT(t)

	held, err := a.Turn(ctx, "printer")
	require.NoError(t, err)
	var once sync.Once
	sentinel.SetAfterDraw(func(ticket int64) {
		if ticket <= held.Ticket() {
			return
		}
		once.Do(func() {
			require.NoError(t, held.Release(ctx))
			// The grant's wake-up reached b's hub before b listens on
			// its ticket.
			deadline := time.Now().Add(2 * time.Second)
			for !sentinel.TurnWakeKept(b, "default", ticket) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		})
	})
	defer sentinel.SetAfterDraw(nil)

	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tb, err := b.Turn(tctx, "printer")
	require.NoError(t, err, "the grant made before the waiter subscribed was missed")
	require.Equal(t, []string{"draw"}, logB.take(), "the kept grant ends the wait with no statement")
	require.NoError(t, tb.Release(ctx))
}

// Issue 30: a schema migrated by an older release (version 19, without
// queue_draw) reports ErrNotMigrated from Turn, not "function does not
// exist".
func TestTurnOnASchemaBehindTheCodeReportsNotMigrated(t *testing.T) {
	c := clientOnSchemaAt(t, 19)
	ctx := ctxT(t)
	_, err := c.Turn(ctx, "printer")
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
	require.Contains(t, err.Error(), "Migrate")

	require.NoError(t, c.Migrate(ctx))
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
}

// A draw that waited for the queue's lock while the leave ahead of it
// committed must not take the ticket that left for a live one ahead: it
// would sleep until that ticket's expiry, and no later leave would wake
// it. The ticket ahead is read after the lock is held, with a snapshot of
// its own (queue_draw), not the statement's (taken before the wait).
func TestTurnDrawThatWaitedForTheQueueSeesTheLeaveAhead(t *testing.T) {
	e, a, _, b, _ := twoQueueClients(t)
	ctx := ctxT(t)
	held, err := a.Turn(ctx, "printer")
	require.NoError(t, err)

	// A leave in the making: it holds the queue's lock, as Turn.leave
	// does, while b's draw waits for it.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'printer' FOR NO KEY UPDATE")
	require.NoError(t, err)

	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		tb, err := b.Turn(tctx, "printer")
		if err == nil {
			err = tb.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%`+e.schema+`%'`).Scan(&n)
		return err == nil && n == 1
	}, 5*time.Second, time.Millisecond, "b's draw waits for the queue's lock")
	// The holder's ticket leaves (its wake-up could not name b: b's
	// ticket is not drawn yet), and the lock is given up.
	_, err = tx.Exec(ctx, "DELETE FROM "+e.table("tickets")+" WHERE namespace = 'default' AND resource = 'printer' AND ticket = $1", held.Ticket())
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-got, "b took the ticket that had left for one ahead of it")
}

// queueEvents returns resource's recorded events, oldest first, as
// "<ticket> <event>" (and " by <ticket>" when recorded by another).
func queueEvents(t *testing.T, e *env, resource string) []string {
	t.Helper()
	rows, err := admin.Query(ctxT(t), "SELECT ticket, event, coalesce(by_ticket, 0) FROM "+e.table("queue_events")+
		" WHERE resource = $1 ORDER BY id", resource)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var ticket, by int64
		var ev string
		require.NoError(t, rows.Scan(&ticket, &ev, &by))
		s := fmt.Sprintf("%d %s", ticket, ev)
		if by != 0 {
			s += fmt.Sprintf(" by %d", by)
		}
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A lone Turn is one statement: with no live ticket ahead, the draw serves
// its ticket under the queue's lock, removing the dead tickets below it
// first (recorded as crashed or bumped by it), and records assigned then
// granted.
func TestTurnWithNobodyAheadIsServedByItsDraw(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, log := queueLoggedClient(t, e, &sentinel.Config{DefaultTTL: 30 * time.Second})

	first, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, []string{"draw"}, log.take())
	require.NoError(t, first.Release(ctx))
	log.take()

	// A holder and a waiter that died (expired, never removed).
	_, err = admin.Exec(ctx, "INSERT INTO "+e.table("tickets")+
		` (namespace, resource, ticket, owner, drawn_at, served_at, expires_at) VALUES
		('default', 'printer', $1, 'gone', pg_catalog.now(), pg_catalog.now(), pg_catalog.now() - interval '1 s'),
		('default', 'printer', $2, 'gone', pg_catalog.now(), NULL, pg_catalog.now() - interval '1 s')`,
		first.Ticket()+1000000, first.Ticket()+1000001)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_catalog.setval($1::regclass, $2)", e.schema+".fencing_token", first.Ticket()+1000002)
	require.NoError(t, err)
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, []string{"draw"}, log.take(), "dead tickets below do not cost a serving check")
	q, err := c.Queue(ctx, "printer")
	require.NoError(t, err)
	require.NotNil(t, q.Holder)
	require.Equal(t, tn.Ticket(), q.Holder.Ticket)
	require.False(t, q.Holder.ServedAt.IsZero(), "served_at written by the draw")
	require.Empty(t, q.Waiting)
	require.Zero(t, e.count("tickets", "ticket < $1", tn.Ticket()), "the dead tickets were removed")
	f, n := first.Ticket(), tn.Ticket()
	require.Equal(t, []string{
		fmt.Sprintf("%d assigned", f), fmt.Sprintf("%d granted", f), fmt.Sprintf("%d completed", f),
		fmt.Sprintf("%d assigned", n),
		fmt.Sprintf("%d crashed by %d", f+1000000, n), fmt.Sprintf("%d bumped by %d", f+1000001, n),
		fmt.Sprintf("%d granted", n),
	}, queueEvents(t, e, "printer"))
	require.NoError(t, tn.Release(ctx))
}

// A dead ticket below that another transaction holds locked (a renewal, a
// VerifyTurn guard) is not waited for under the queue's lock: the draw
// serves nothing, and the waiter's serving check waits for that row and
// decides, as before. Served by the draw here, the turn would begin while
// the guard that may still write under the dead ticket is open.
func TestTurnDrawSkipsADeadTicketLockedElsewhere(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, log := queueLoggedClient(t, e, &sentinel.Config{DefaultTTL: 30 * time.Second})
	_, err := admin.Exec(ctx, "INSERT INTO "+e.table("tickets")+
		` (namespace, resource, ticket, owner, drawn_at, served_at, expires_at) VALUES
		('default', 'printer', 1, 'gone', pg_catalog.now(), pg_catalog.now(), pg_catalog.now() - interval '1 s')`)
	require.NoError(t, err)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("tickets")+" WHERE ticket = 1 FOR KEY SHARE")
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		tn, err := c.Turn(ctx, "printer")
		if err == nil {
			err = tn.Release(ctx)
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%mw AS (SELECT me.label%' AND query LIKE '%`+e.schema+`%'`).Scan(&n)
		return err == nil && n == 1
	}, 5*time.Second, time.Millisecond, "the serving check waits for the locked dead ticket")
	select {
	case err := <-got:
		t.Fatalf("Turn returned while a dead ticket below it was locked: %v", err)
	default:
	}
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-got)
	require.Equal(t, []string{"draw", "serve"}, log.take())
}

// A draw that served its ticket commits durably, as every grant does (its
// holder is told only once the grant is on disk); any other draw commits
// without waiting for its flush. The setting is the transaction's, so it
// shows inside one.
func TestTurnDrawCommitsDurablyOnlyWhenItServes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	setting := func(resource string) (served bool, sc string) {
		t.Helper()
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		var ticket, ahead, pred int64
		var drawn, expires time.Time
		var left, predLeft time.Duration
		var predOwner string
		require.NoError(t, tx.QueryRow(ctx, sentinel.DrawSQL(c), "default", resource, "", "o", "h", 1, int64(30e6), "ch", false, "", int64(1), false).
			Scan(&ticket, &drawn, &expires, &left, &ahead, &pred, &predOwner, &predLeft, &served))
		require.NoError(t, tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&sc))
		return served, sc
	}
	served, sc := setting("empty")
	require.True(t, served)
	require.Equal(t, "on", sc, "a draw that served its ticket")
	held, err := c.Turn(ctx, "busy")
	require.NoError(t, err)
	served, sc = setting("busy")
	require.False(t, served)
	require.Equal(t, "off", sc, "a draw behind a live ticket")
	require.NoError(t, held.Release(ctx))
}

// A draw sent again after one whose reply was lost (retry) adopts the
// live ticket of its owner carrying the same mark: waiting, or served
// meanwhile by the leave ahead (then it says served). A first attempt
// never looks, and a marked ticket that expired is not adopted: a new one
// is drawn.
func TestTurnDrawRetryAdoptsItsOwnLiveTicket(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	draw := func(owner string, ttl time.Duration, nonce int64, retry bool) (ticket int64, served bool) {
		t.Helper()
		var ahead, pred int64
		var drawn, expires time.Time
		var left, predLeft time.Duration
		var predOwner string
		require.NoError(t, admin.QueryRow(ctx, sentinel.DrawSQL(c), "default", "printer", "", owner, "h", 1, ttl.Microseconds(), "ch", false, "", nonce, retry).
			Scan(&ticket, &drawn, &expires, &left, &ahead, &pred, &predOwner, &predLeft, &served))
		return ticket, served
	}
	tickets := func() int {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+e.table("tickets")).Scan(&n))
		return n
	}
	held, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	first, served := draw("o", 30*time.Second, 7, false)
	require.False(t, served)
	again, served := draw("o", 30*time.Second, 7, true)
	require.Equal(t, first, again, "the retry adopted the ticket of its lost attempt")
	require.False(t, served)
	other, _ := draw("p", 30*time.Second, 7, true)
	require.NotEqual(t, first, other, "another owner's mark is not ours")
	require.Equal(t, 3, tickets())

	require.NoError(t, held.Release(ctx)) // grants first
	again, served = draw("o", 30*time.Second, 7, true)
	require.Equal(t, first, again)
	require.True(t, served, "granted by the leave ahead while the reply was lost")
	fresh, _ := draw("o", 30*time.Second, 7, false)
	require.Greater(t, fresh, other, "a first attempt never adopts")

	short, _ := draw("q", 100*time.Millisecond, 9, false)
	time.Sleep(200 * time.Millisecond)
	redrawn, _ := draw("q", 30*time.Second, 9, true)
	require.Greater(t, redrawn, short, "an expired ticket is dead: a new one is drawn")
}
