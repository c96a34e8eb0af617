package sentinel

// This file: what the command and console read and do on queues: Ticket, QueueStatus, Queue(s), ResetQueue(s), QueueEvent, QueueHistory and FollowQueues.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Queue event types, in the history and in FollowQueues.
const (
	QueueAssigned  = "assigned"  // a ticket was drawn (with its label)
	QueueGranted   = "granted"   // a ticket was served: its holder may work
	QueueCompleted = "completed" // the holder released its turn
	QueueCancelled = "cancelled" // a waiter left before being served, or before Turn returned (granted as its ctx ended: given back)
	QueueCrashed   = "crashed"   // a served ticket expired (its holder died or froze) and was removed
	QueueBumped    = "bumped"    // a waiting ticket expired and was skipped
)

// Ticket is one live ticket of a queue.
type Ticket struct {
	Ticket    int64  // the ticket number: a fencing token
	Label     string // see WithLabel
	Owner     string // the client that drew it
	Host      string
	PID       int
	DrawnAt   time.Time // database clock
	ServedAt  time.Time // database clock; zero until served (see QueueStatus.Holder), which may be before its Turn returns
	ExpiresAt time.Time // database clock; renewed by its client's heartbeat
}

// QueueStatus is a snapshot of one resource's queue.
type QueueStatus struct {
	Namespace string
	Resource  string
	// Holder is the lowest live ticket: the one whose turn it is (derived,
	// never stored). It is served by its draw (nobody ahead) or by the
	// leave of the ticket ahead, in the same statement, whether or not its
	// client has heard yet; its ServedAt is zero only while its own serving
	// check is due (the ticket ahead died, its leave found this one's row
	// busy or a dead ticket below it locked elsewhere, or its draw found
	// such a dead ticket). Nil when the queue is empty.
	Holder *Ticket
	// Waiting are the other live tickets, in the order they will be served.
	Waiting []Ticket
}

// queueKey names a queue: its namespace (empty when the statement read one
// namespace) and its resource.
type queueKey struct{ ns, res string }

// scanTickets groups rows of live tickets by queue, in the order the rows
// name the queues; withNS: each row starts with the ticket's namespace.
func scanTickets(rows pgx.Rows, withNS bool) (map[queueKey][]Ticket, []queueKey, error) {
	defer rows.Close()
	byQueue := map[queueKey][]Ticket{}
	var order []queueKey
	for rows.Next() {
		var (
			k      queueKey
			t      Ticket
			served *time.Time
		)
		dest := []any{&k.res, &t.Ticket, &t.Label, &t.Owner, &t.Host, &t.PID, &t.DrawnAt, &served, &t.ExpiresAt}
		if withNS {
			dest = append([]any{&k.ns}, dest...)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, err
		}
		if served != nil {
			t.ServedAt = *served
		}
		if _, ok := byQueue[k]; !ok {
			order = append(order, k)
		}
		byQueue[k] = append(byQueue[k], t)
	}
	return byQueue, order, rows.Err()
}

func queueStatus(ns, res string, ts []Ticket) QueueStatus {
	q := QueueStatus{Namespace: ns, Resource: res}
	if len(ts) > 0 {
		h := ts[0]
		q.Holder = &h
		q.Waiting = append([]Ticket{}, ts[1:]...)
	}
	return q
}

// Queue returns a snapshot of resource's queue: its holder (the lowest live
// ticket) and its waiters, with labels. An empty queue has a nil Holder.
// Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) Queue(ctx context.Context, resource string, opts ...Option) (*QueueStatus, error) {
	if err := checkCtx("Client.Queue", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveResource("Queue", resource, opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().queue, o.namespace, resource)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read queue %q/%q", o.namespace, resource), err)
	}
	byQueue, _, err := scanTickets(rows, false)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read queue %q/%q", o.namespace, resource), err)
	}
	q := queueStatus(o.namespace, resource, byQueue[queueKey{res: resource}])
	return &q, nil
}

// Queues returns every queue of the namespace that has a live ticket,
// sorted by resource. Options: WithNamespace.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Queues(ctx context.Context, opts ...Option) ([]QueueStatus, error) {
	if err := checkCtx("Client.Queues", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveNamespace("Queues", opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().queues, o.namespace)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	byQueue, order, err := scanTickets(rows, false)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	out := make([]QueueStatus, 0, len(order))
	for _, k := range order {
		out = append(out, queueStatus(o.namespace, k.res, byQueue[k]))
	}
	return out, nil
}

// AllQueues returns every queue of every namespace that has a live ticket,
// sorted by namespace and resource, each naming its namespace: what an
// operator who names no namespace looks at. A nil ctx is refused (ErrInvalid).
func (c *Client) AllQueues(ctx context.Context) ([]QueueStatus, error) {
	if err := checkCtx("Client.AllQueues", ctx); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().allQueues)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	byQueue, order, err := scanTickets(rows, true)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	out := make([]QueueStatus, 0, len(order))
	for _, k := range order {
		out = append(out, queueStatus(k.ns, k.res, byQueue[k]))
	}
	return out, nil
}

// resolveNamespace resolves options for a call on a whole namespace.
func (c *Client) resolveNamespace(call string, opts []Option) (callOptions, error) {
	return c.resolveTurn(call, "-", opts, 0)
}

// resolveResource resolves options for call, which reads or tends one
// resource's queue and takes only WithNamespace.
func (c *Client) resolveResource(call, resource string, opts []Option) (callOptions, error) {
	return c.resolveTurn(call, resource, opts, 0)
}

// ResetQueue removes the dead tickets of resource (expired by the database
// clock, not yet skipped) and returns how many it removed, recording each
// as `crashed` or `bumped`. A queue with a live holder or waiter is not
// touched: it returns a *QueueBusyError (ErrQueueBusy) and removes nothing.
// Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) ResetQueue(ctx context.Context, resource string, opts ...Option) (int, error) {
	if err := checkCtx("Client.ResetQueue", ctx); err != nil {
		return 0, err
	}
	o, err := c.resolveResource("ResetQueue", resource, opts)
	if err != nil {
		return 0, err
	}
	var live, removed int
	if err := c.pool.QueryRow(ctx, c.qsql().reset, o.namespace, resource, c.sql.channel).Scan(&live, &removed); err != nil {
		return 0, c.wrapErr(fmt.Sprintf("reset queue %q/%q", o.namespace, resource), err)
	}
	if live > 0 {
		return 0, &QueueBusyError{Namespace: o.namespace, Resource: resource, Live: live}
	}
	return removed, nil
}

// ResetQueues runs ResetQueue on every resource of the namespace that has
// a ticket, live or dead (turn's `reset` without resource names). It
// returns how many dead tickets it removed per resource, and an error
// joining a *QueueBusyError (ErrQueueBusy) for every busy queue it left
// alone. Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) ResetQueues(ctx context.Context, opts ...Option) (map[string]int, error) {
	if err := checkCtx("Client.ResetQueues", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveNamespace("ResetQueues", opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().resources, o.namespace)
	if err != nil {
		return nil, c.wrapErr("list queues", err)
	}
	resources, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, c.wrapErr("list queues", err)
	}
	removed := map[string]int{}
	var errs []error
	for _, r := range resources {
		n, err := c.ResetQueue(ctx, r, WithNamespace(o.namespace))
		var busy *QueueBusyError
		switch {
		case errors.As(err, &busy):
			errs = append(errs, err)
		case err != nil:
			return removed, err
		case n > 0:
			removed[r] = n
		}
	}
	return removed, errors.Join(errs...)
}

// QueueEvent is one step in a queue's progression.
type QueueEvent struct {
	ID        int64 // increasing in insertion order
	Namespace string
	Resource  string
	Ticket    int64
	Type      string // QueueAssigned, QueueGranted, ...
	Label     string // the ticket's label
	Owner     string // the client that drew the ticket
	By        int64  // for crashed/bumped: the ticket that skipped it (0: ResetQueue, Prune or the owner)
	At        time.Time
}

// String renders the event like turn's follow:
//
//	printer: 5 assigned to "nightly report"
//	printer: 5 granted
//	printer: 5 completed by "nightly report"
func (e QueueEvent) String() string {
	res := e.Resource
	if strings.ContainsFunc(res, func(r rune) bool { return !strconv.IsPrint(r) }) {
		res = strconv.Quote(res)
	}
	s := fmt.Sprintf("%s: %d ", res, e.Ticket)
	switch e.Type {
	case QueueAssigned:
		return s + "assigned to " + strconv.Quote(e.Label)
	case QueueCompleted:
		return s + "completed by " + strconv.Quote(e.Label)
	case QueueCancelled:
		return s + "cancelled by " + strconv.Quote(e.Label)
	case QueueCrashed, QueueBumped:
		s += e.Type + " (" + strconv.Quote(e.Label) + ")"
		if e.By != 0 {
			s += fmt.Sprintf(", skipped by %d", e.By)
		}
		return s
	default:
		return s + e.Type
	}
}

func (c *Client) queueEvents(ctx context.Context, ns string, resources []string, after int64, limit int) ([]QueueEvent, error) {
	rows, err := c.pool.Query(ctx, c.qsql().events, ns, resources, after, limit)
	if err != nil {
		return nil, c.wrapErr("read queue events", err)
	}
	defer rows.Close()
	var out []QueueEvent
	for rows.Next() {
		e := QueueEvent{Namespace: ns}
		if err := rows.Scan(&e.ID, &e.Resource, &e.Ticket, &e.Type, &e.Label, &e.Owner, &e.By, &e.At); err != nil {
			return nil, c.wrapErr("read queue events", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, c.wrapErr("read queue events", err)
	}
	return out, nil
}

// QueueHistory returns the recorded events of resource's queue, oldest
// first, at most limit of them after event id after (0: from the start).
// Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) QueueHistory(ctx context.Context, resource string, after int64, limit int, opts ...Option) ([]QueueEvent, error) {
	if err := checkCtx("Client.QueueHistory", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveResource("QueueHistory", resource, opts)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || after < 0 {
		return nil, invalid("limit", "limit must be positive and after non-negative, got %d and %d", limit, after)
	}
	return c.queueEvents(ctx, o.namespace, []string{resource}, after, limit)
}

// followGapWait is how long FollowQueues waits for an event whose id was
// skipped (its transaction still committing) before giving up on it.
const followGapWait = 2 * time.Second

// followRegistration is how long one registration of a follower lasts (at
// least four Config.WaitRecheck); it is renewed when half of it is left, so
// a follower that died makes its namespace's events notify for at most
// this long.
func followRegistration(recheck time.Duration) time.Duration {
	// Four of a WaitRecheck beyond a quarter of the longest duration would
	// overflow: such a follower is registered for about that longest one.
	return max(30*time.Second, 4*min(recheck, math.MaxInt64/4))
}

// queueFollowJoin registers a follower of ns for d (sqlQueueFollow). in is
// false when the row was locked by statements recording events.
func (c *Client) queueFollowJoin(ctx context.Context, ns string, d time.Duration) (in bool, err error) {
	var n int64
	if err := c.pool.QueryRow(ctx, c.qsql().follow, ns, us(d)).Scan(&n); err != nil {
		return false, c.wrapErr("follow queues: register", err)
	}
	return n > 0, nil
}

// FollowQueues calls fn with every queue event recorded from now on for the
// given resources (nil or empty: every resource of the namespace, including
// queues created later), in id order, until ctx ends or fn returns an error.
// It is woken by notifications and re-reads the history every
// Config.WaitRecheck, so no event is missed when a notification is. It
// returns fn's error, or ctx's error when ctx ends. Options: WithNamespace;
// WithAfterEvent to resume after a known event (or replay the history)
// instead of starting from now: a follower started in a goroutine may take
// its position after the caller's next statement, so use it when no event
// may be missed.
//
// Queue events send a NOTIFY only while some follower of the namespace is
// registered (migration 7); a follower registers itself while it follows,
// and a registration left by one that died expires within
// max(30s, 4 × WaitRecheck). A nil ctx is refused (ErrInvalid).
func (c *Client) FollowQueues(ctx context.Context, resources []string, fn func(QueueEvent) error, opts ...Option) error {
	if err := checkCtx("Client.FollowQueues", ctx); err != nil {
		return err
	}
	if fn == nil {
		return invalid("fn", "must not be nil")
	}
	o, err := c.resolveTurn("FollowQueues", "-", opts, takesAfter)
	if err != nil {
		return err
	}
	var filter []string
	for _, r := range resources {
		if err := checkName("resource", r, MaxKeyLen); err != nil {
			return err
		}
		filter = append(filter, r)
	}
	wake, listening := c.ln.subscribe(ctx, notifyQueue, o.namespace, "")
	defer c.ln.unsubscribe(notifyQueue, o.namespace, "", wake)
	low := o.after // every event with id <= low was delivered or is older than the window
	if !o.afterSet {
		if err := c.pool.QueryRow(ctx, c.qsql().head).Scan(&low); err != nil {
			return c.wrapErr("follow queues", err)
		}
	}
	followStarted(ctx)
	// Ids are assigned before commit, so an event may become visible
	// after one with a higher id. Delivered events stay in a window of
	// followGapWait; low only moves past them once they leave it, so a
	// late commit within the window is still read (and delivered once).
	delivered := map[int64]time.Time{}
	const batch = 1000
	// The statements that record queue events notify only while a follower of
	// the namespace is registered (queue_followers.following_until, migration
	// 7): a transaction that calls NOTIFY serializes its commit on a
	// database-wide lock. A follower registers (sqlQueueFollow), then reads
	// the events after the last one it delivered, and only then sleeps; it
	// never misses a wake-up:
	//
	//   - It LISTENs before it registers (subscribe), so every notification
	//     sent after its registration commits reaches it.
	//   - A statement recording events locks the namespace's queue_followers
	//     row FOR SHARE, after its events are written, and notifies when the
	//     row's newest version says a follower is registered (followersCTE).
	//     The registration updates that row, so the two are ordered by its
	//     lock. If the registration commits first (or holds the row when
	//     the statement locks it: the statement waits), the statement reads
	//     it and notifies. If the statement locks first, no registration can
	//     update the row until the statement commits (one skips the row and
	//     registers nothing; the namespace's first one waits), so the read
	//     after a registration that succeeded sees the statement's events.
	//     Either way they are delivered without waiting for the WaitRecheck
	//     re-read.
	//   - A registration that finds the row locked registers nothing; the
	//     follower re-reads soon, backing off up to WaitRecheck, and tries
	//     again. It sleeps the full WaitRecheck only while registered for
	//     longer than that.
	//   - A registration lasts followRegistration and is renewed (then the
	//     history re-read) when half of it is left, so it never lapses during
	//     a sleep. One left by a follower that died or stopped costs a NOTIFY
	//     per event until it expires, never a missed wake-up.
	reg := followRegistration(c.cfg.WaitRecheck)
	var registered time.Time // this follower is registered until then at least (local clock)
	recheck := 10 * time.Millisecond
	for {
		evs, err := c.queueEvents(ctx, o.namespace, filter, low, batch)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil && !transient(err) {
			return err
		}
		fresh := 0
		now := time.Now()
		for _, e := range evs {
			if _, ok := delivered[e.ID]; ok {
				continue
			}
			fresh++
			delivered[e.ID] = now
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(evs) == batch && fresh == 0 {
			low = evs[len(evs)-1].ID // a full window of old events: move on
		}
		for id, at := range delivered {
			if now.Sub(at) > followGapWait && id > low {
				low = id
			}
		}
		for id := range delivered {
			if id <= low {
				delete(delivered, id)
			}
		}
		if len(evs) == batch {
			continue
		}
		delay := c.cfg.WaitRecheck
		if listening && time.Until(registered) < reg/2 {
			// Register (or renew), then read again before sleeping: see
			// above.
			sent := time.Now()
			in, err := c.queueFollowJoin(ctx, o.namespace, reg)
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err()
			case err != nil && !transient(err):
				return err
			case in:
				registered, recheck = sent.Add(reg), 10*time.Millisecond
				continue
			}
			if time.Until(registered) < delay {
				// Not registered for the whole sleep: nothing may
				// notify; re-read soon, backing off.
				delay = min(delay, recheck)
				recheck = min(2*recheck, c.cfg.WaitRecheck)
			}
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		listening = c.ln.listening()
	}
}
