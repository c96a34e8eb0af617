package sentinel

import (
	"context"
	"strconv"
)

// WithFollowStarted returns a ctx for Follow or FollowQueues that calls f
// once the follower holds its starting position: events committed after f
// ran are delivered. Tests use it instead of sleeping.
func WithFollowStarted(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, followStartedKey{}, f)
}

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
