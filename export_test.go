package sentinel

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// WithFollowStarted returns a ctx for Follow or FollowQueues that calls f
// once the follower holds its starting position: events committed after f
// ran are delivered. Tests use it instead of sleeping.
func WithFollowStarted(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, followStartedKey{}, f)
}

// AdoptSQL is c's adoption statement (Client.AdoptHandle).
func AdoptSQL(c *Client) string { return c.sql.adopt }

// RenewSQL is c's heartbeat renewal statement.
func RenewSQL(c *Client) string { return c.sql.renew }

// SetSQL is c's set statement of coalescer kind kind.
func SetSQL(c *Client, kind int) string { return c.co.set[kind] }

// SetPlanSQL is the statement sent before every set statement.
const SetPlanSQL = sqlSetPlan

// SetAfterFn makes every Once in this process call f(key) after fn
// returned and before its outcome is recorded (nil: nothing). Child
// processes of the crash tests block there to be killed.
func SetAfterFn(f func(key string)) { testAfterFn = f }

// EffectKeyOf is EffectKey for a namespace and key.
func EffectKeyOf(ns, key string) string { return effectKey(ns, key) }

// FollowFromGaps is Follow resumed from a position with gaps given as
// they are, past the bounds a cursor may name: a follower's own state
// when more transactions than a cursor may name were in flight at once.
func FollowFromGaps(ctx context.Context, c *Client, id int64, gaps [][2]int64, fn func(Event) error) error {
	fw, err := c.newFollower(FollowFilter{})
	if err != nil {
		return err
	}
	fw.resume = &followCursor{id: id, gaps: gaps, exact: true}
	return fw.run(ctx, fn)
}

// DropWakes makes c send no wake-up after its handovers commit, as a
// process killed between the commit and the wake-up would.
func DropWakes(c *Client) { c.dropWakes.Store(true) }

// Channel is the client's LISTEN/NOTIFY channel.
func Channel(c *Client) string { return c.sql.channel }

// SetAfterDraw makes every Turn in this process call f(ticket) after its
// draw returned and before its waiter subscribes to the ticket (nil:
// nothing).
func SetAfterDraw(f func(ticket int64)) {
	if f == nil {
		testAfterDraw.Store(nil)
		return
	}
	testAfterDraw.Store(&f)
}

// SetDrawNonce makes every draw in this process carry the mark f returns
// (nil: a random mark per draw, as always).
func SetDrawNonce(f func() int64) {
	if f == nil {
		testDrawNonce.Store(nil)
		return
	}
	testDrawNonce.Store(&f)
}

// TurnWakeKept reports whether c's hub keeps an 's' wake-up for ticket of
// namespace ns (a draw window is open: see listenHub.keepTurn).
func TurnWakeKept(c *Client, ns string, ticket int64) bool {
	c.ln.mu.Lock()
	h := c.ln.hub
	c.ln.mu.Unlock()
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.turnKept[waitKey{notifyTurnServed, ns, strconv.FormatInt(ticket, 10)}]
	return ok
}

// DrawSQL is c's draw statement (queue_sql.go).
func DrawSQL(c *Client) string { return c.qsql().draw }

// Listening reports whether c's LISTEN hub is listening.
func Listening(c *Client) bool { return c.ln.listening() }

// HistorySQL is c's read of a key's events, newest first, with a limit
// ($3; NULL: all).
func HistorySQL(c *Client) string { return c.exe.history }

// LastRunSQL is c's read of a key's last run.
func LastRunSQL(c *Client) string { return c.exe.lastRun }

// LeaseGrantsKept is how many lease grant wake-ups ('w') c's hub keeps for
// their waiters.
func LeaseGrantsKept(c *Client) int {
	c.ln.mu.Lock()
	h := c.ln.hub
	c.ln.mu.Unlock()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for k := range h.kept {
		if k.kind == notifyLeaseGrant {
			n++
		}
	}
	return n
}

// OnceTxCommitReplyLost is OnceTx whose commit's reply is lost while the
// commit is in flight: the commit is sent after delay, in the background,
// and the call is told at once that it failed, as when the connection
// drops while the commit waits (for a synchronous standby, say). done is
// closed once the commit ended.
func OnceTxCommitReplyLost[T any](ctx context.Context, c *Client, key string, delay time.Duration,
	fn func(ctx context.Context, tx pgx.Tx) (T, error)) (res Result[T], done <-chan struct{}, err error) {
	var tx pgx.Tx
	ended := make(chan struct{})
	res, err = onceInTx(ctx, c, key, nil, "OnceTx",
		func(ctx context.Context) (txRunner, error) {
			var err error
			tx, err = c.pool.Begin(ctx)
			return lostReplyRunner{pgxTxRunner{tx}, delay, ended}, err
		},
		func(ctx context.Context) (T, error) { return fn(ctx, tx) })
	return res, ended, err
}

type lostReplyRunner struct {
	pgxTxRunner
	delay time.Duration
	ended chan struct{}
}

func (r lostReplyRunner) commit(context.Context) error {
	go func() {
		defer close(r.ended)
		time.Sleep(r.delay)
		_ = r.tx.Commit(context.Background())
	}()
	return errors.New("commit's reply lost (connection reset)")
}

// StallTicket makes the live ticket of c on ns/res numbered ticket look as
// it does in a process that was frozen (SIGSTOP, a paused VM) past its
// local deadline and has just resumed: no longer renewed, its deadline
// passed, and its deadline timer not fired yet. It reports whether it found
// the ticket.
func StallTicket(c *Client, ns, res string, ticket int64) bool {
	v, ok := localTickets.Load(ticketKey{c: c, ns: ns, res: res, ticket: ticket})
	if !ok {
		return false
	}
	StallLease(v.(*Lease))
	return true
}

// StallLease makes l look as it does in a process that was frozen (SIGSTOP,
// a paused VM) past its local deadline and has just resumed: no longer
// renewed, its deadline passed, and its deadline timer not fired yet.
func StallLease(l *Lease) {
	l.c.hb.remove(l)
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
	}
	l.deadline = time.Now().Add(-time.Millisecond)
	l.mu.Unlock()
}

// GiveBack runs t's leave, as Client.Close's give-back does, and reports
// whether it found the ticket live (found and alive).
func GiveBack(ctx context.Context, t *Turn) (bool, error) {
	r, err := t.leave(ctx)
	return r.found && r.alive, err
}

// ReleaseUnderWay reports whether a Release of l (Lease.Release) is in
// flight: it holds l's release lock and has not returned.
func ReleaseUnderWay(l *Lease) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releasing
}

// SetCloseAfterStop makes c's Close call f once its heartbeater stopped,
// before it ends the leases and turns it held. Call it before Close.
func SetCloseAfterStop(c *Client, f func()) { c.testAfterStop = f }

// TurnReleaseUnderWay reports whether a Turn.Release of t is in flight.
func TurnReleaseUnderWay(t *Turn) bool { return ReleaseUnderWay(t.l) }

// WaitLeaveSQL is the statement that withdraws a lease waiter's
// registration (sqlLeaseWaitLeave).
func WaitLeaveSQL(c *Client) string { return c.sql.waitLeave }
