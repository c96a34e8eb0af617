package sentinel

// This file: The heartbeater: one goroutine per Client renewing every held lease in batched statements, and what it does when a renewal fails.

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// heartbeater renews every lease and execution lease of one client from a
// single goroutine, in one statement per tick however many are held. Loss
// detection does not depend on it: each lease carries its own deadline timer
// (a runtime timer, not a goroutine), so a heartbeat stuck on a dead
// connection cannot delay a lease's Done past its deadline.
type heartbeater struct {
	c *Client

	mu       sync.Mutex
	held     map[*Lease]struct{}
	wake     chan struct{}
	quit     chan struct{}
	ctx      context.Context // cancelled by stop: aborts a renewal in flight
	cancel   context.CancelFunc
	stopped  chan struct{}
	started  bool
	stopping bool
	// wakeAt is when the loop will next wake by itself (zero: it is busy
	// renewing, or about to). A new lease pokes the loop only when it falls
	// due before that: waking a goroutine per grant costs a thread switch
	// that competes with the database on small machines.
	wakeAt time.Time
	// inflight counts renewal statements under way. The loop never waits
	// for one: a statement stuck on a dead connection cannot delay the
	// renewal of any other lease, which goes out on another connection.
	inflight int
	flights  sync.WaitGroup
}

// maxInflight bounds the renewal statements one client has under way.
const maxInflight = 4

// cappedSlack is how close to its hard expiry a new lease counts as capped.
const cappedSlack = time.Millisecond

func newHeartbeater(c *Client) *heartbeater {
	ctx, cancel := context.WithCancel(context.Background())
	return &heartbeater{
		ctx:     ctx,
		cancel:  cancel,
		c:       c,
		held:    make(map[*Lease]struct{}),
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
}

// add registers a freshly granted lease. sent is the local time the grant
// statement was sent; remaining is the time left on the lease as computed
// by the database. It returns false, registering nothing, once the client
// is closing: the caller must give the grant back and report ErrClosed.
func (h *heartbeater) add(l *Lease, sent time.Time, remaining time.Duration, expiresAt, hardAt time.Time) bool {
	l.mu.Lock()
	l.expiresAt, l.hardAt = expiresAt, hardAt
	// Capped: no renewal can extend the lease. The grant computes its
	// expiry and its hard expiry from two clock reads, microseconds apart,
	// so a hard TTL equal to the TTL (WithHardTTL(ttl)) leaves a sliver that
	// renewals would extend by nothing worth a statement.
	l.capped = !hardAt.IsZero() && hardAt.Sub(expiresAt) < cappedSlack
	l.deadline = sent.Add(remaining - l.margin)
	// The first renewal is due a renewal interval after the grant's
	// statement was sent, or sooner when less is left: a grant read long
	// after it was made (its wake-up lost, read at the registration's
	// renewal) may have a third of its TTL left, and its deadline would
	// come before a renewal interval. Halfway to the deadline then, so a
	// failed attempt is retried before it.
	l.nextDue = sent.Add(min(l.renewEvery, max((remaining-l.margin)/2, 0)))
	capped, due := l.capped, l.nextDue
	l.mu.Unlock()

	// Register before arming the deadline timer: a deadline already past
	// fires at once, and its end() must find the lease to remove it. (h.mu
	// is never taken while holding l.mu: due() nests them the other way.)
	h.mu.Lock()
	if h.stopping {
		h.mu.Unlock()
		return false
	}
	h.held[l] = struct{}{}
	poke := !capped && !h.wakeAt.IsZero() && due.Before(h.wakeAt)
	if !h.started {
		h.started, poke = true, false
		h.wakeAt = time.Time{}
		go h.loop()
	}
	h.mu.Unlock()

	l.mu.Lock()
	if l.err == nil {
		l.timer = time.AfterFunc(max(time.Until(l.deadline), 0), l.checkDeadline)
	}
	l.mu.Unlock()
	if poke {
		h.poke()
	}
	return true
}

func (h *heartbeater) registered(l *Lease) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.held[l]
	return ok
}

func (h *heartbeater) remove(l *Lease) {
	h.mu.Lock()
	delete(h.held, l)
	h.mu.Unlock()
}

func (h *heartbeater) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// stop ends the loop and returns the leases still held.
func (h *heartbeater) stop() []*Lease {
	h.mu.Lock()
	started := h.started
	h.started = true  // no loop may start after stop
	h.stopping = true // no lease may be added after stop
	close(h.quit)
	h.cancel()
	held := make([]*Lease, 0, len(h.held))
	for l := range h.held {
		held = append(held, l)
	}
	h.mu.Unlock()
	if started {
		<-h.stopped
	}
	return held
}

func (h *heartbeater) loop() {
	defer close(h.stopped)
	defer h.flights.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := h.due(time.Now())
		if len(due) > 0 {
			h.flights.Add(1)
			go func() {
				defer h.flights.Done()
				_ = h.renewBatch(h.ctx, due, false)
				h.landed(due)
			}()
			continue
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-h.quit:
			return
		case <-h.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// landed marks a batch's renewal finished and wakes the loop to schedule
// what falls due next.
func (h *heartbeater) landed(ls []*Lease) {
	for _, l := range ls {
		l.mu.Lock()
		l.renewing = false
		l.mu.Unlock()
	}
	h.mu.Lock()
	h.inflight--
	h.mu.Unlock()
	h.poke()
}

// due returns the leases to renew now, and the earliest due time of the
// rest. A tick happens when some lease is due; it also takes every lease
// that would fall due within half its renewal interval, so leases acquired
// at different moments converge on the same tick, and a client makes at
// most two renewal statements per interval however its leases are spread.
// (Taking early leases without a lease actually due would chain: each
// statement's duration moves the horizon over a few more leases.)
func (h *heartbeater) due(now time.Time) ([]*Lease, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.quit:
		return nil, time.Time{}
	default:
	}
	var due, early []*Lease
	var next, nextEarly time.Time
	if h.inflight >= maxInflight {
		// Every slot is taken by a statement under way; each is bounded
		// (see renewBatch), and landing wakes the loop.
		h.wakeAt = time.Time{}
		return nil, time.Time{}
	}
	for l := range h.held {
		l.mu.Lock()
		capped, nd, every, renewing := l.capped, l.nextDue, l.renewEvery, l.renewing
		l.mu.Unlock()
		switch {
		case capped, renewing:
			// Nothing to extend; the deadline timer ends it.
		case !nd.After(now):
			due = append(due, l)
		case !nd.After(now.Add(every / 2)):
			early = append(early, l)
			if nextEarly.IsZero() || nd.Before(nextEarly) {
				nextEarly = nd
			}
		default:
			if next.IsZero() || nd.Before(next) {
				next = nd
			}
		}
	}
	if len(due) > 0 {
		h.wakeAt = time.Time{}
		h.inflight++
		due = append(due, early...)
		for _, l := range due {
			l.mu.Lock()
			l.renewing = true
			l.mu.Unlock()
		}
		return due, time.Time{}
	}
	if !nextEarly.IsZero() {
		next = nextEarly
	}
	if next.IsZero() {
		h.wakeAt = now.Add(time.Hour)
	} else {
		h.wakeAt = next
	}
	return nil, next
}

type renewal struct {
	ns, key   string
	kind      leaseKind
	token     int64
	status    string // renewed, busy, lost
	remaining time.Duration
	capped    bool
	expiresAt time.Time
}

func scanRenewals(rows pgx.Rows) ([]renewal, error) {
	var out []renewal
	for rows.Next() {
		var r renewal
		var exp *time.Time
		if err := rows.Scan(&r.ns, &r.key, &r.kind, &r.token, &r.status, &r.remaining, &r.capped, &exp); err != nil {
			rows.Close()
			return nil, err
		}
		if exp != nil {
			r.expiresAt = *exp
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// renew renews leases in one statement now (Lease.Heartbeat).
func (h *heartbeater) renew(ctx context.Context, ls []*Lease) error {
	return h.renewBatch(ctx, ls, true)
}

// renewBatch renews leases in one statement. On a transport or server
// error every lease keeps its deadline and is retried soon; a lease whose
// guard no longer matches is ended at once. A lease whose row was skipped
// because another transaction holds its lock is retried soon, and, when
// strict (a manual Heartbeat), reported as not renewed.
//
// Every attempt is bounded by the shortest renewal interval of the batch
// (at least retryDelay), and never outlives the earliest deadline by
// more than that: a statement stuck on a black-holed connection is
// abandoned in time for a retry on a fresh connection, and while it hangs
// other leases are renewed by other statements (see loop).
func (h *heartbeater) renewBatch(ctx context.Context, ls []*Lease, strict bool) error {
	n := len(ls)
	nss, keys := make([]string, n), make([]string, n)
	tokens, ttls := make([]int64, n), make([]int64, n)
	kinds := make([]int16, n)
	type id struct {
		ns, key string
		kind    leaseKind
		token   int64
	}
	byID := make(map[id]*Lease, n)
	earliest := time.Time{}
	every := time.Duration(0)
	for i, l := range ls {
		nss[i], keys[i], tokens[i], ttls[i], kinds[i] = l.ns, l.key, l.token, us(l.ttl), int16(l.kind)
		byID[id{l.ns, l.key, l.kind, l.token}] = l
		if d := l.Deadline(); earliest.IsZero() || d.Before(earliest) {
			earliest = d
		}
		if every == 0 || l.renewEvery < every {
			every = l.renewEvery
		}
	}
	now := time.Now()
	attempt := max(every, retryDelay(every))
	if left := earliest.Sub(now); left > 0 && left < attempt {
		attempt = max(left, retryDelay(every))
	}
	outer := ctx
	ctx, cancel := context.WithDeadline(ctx, now.Add(attempt))
	defer cancel()
	sent := time.Now()
	rows, err := h.c.pool.Query(ctx, h.c.sql.renew, h.c.cfg.Owner, nss, keys, tokens, ttls, kinds)
	var res []renewal
	if err == nil {
		res, err = scanRenewals(rows)
	}
	if err != nil && outer.Err() != nil {
		// Aborted by Client.Close (the loop's ctx) or by the ctx of
		// Lease.Heartbeat's caller: no failed renewal, nothing to observe
		// or warn about; the leases keep their deadlines.
		return h.c.wrapErr("heartbeat", err)
	}
	if obs := h.c.observer(); obs != nil {
		obs.heartbeat(n, time.Since(sent), err)
	}
	if err != nil {
		err = h.c.wrapErr("heartbeat", err)
		h.c.cfg.Logger.Warn("sentinel: heartbeat failed; retrying until the lease deadlines", "leases", n, "err", err)
		for _, l := range ls {
			l.mu.Lock()
			l.lastErr = err
			l.nextDue = time.Now().Add(retryDelay(l.renewEvery))
			l.mu.Unlock()
		}
		return err
	}
	var firstErr error
	for _, r := range res {
		l := byID[id{r.ns, r.key, r.kind, r.token}]
		if l == nil {
			continue
		}
		switch r.status {
		case "renewed":
			l.mu.Lock()
			if l.err == nil {
				l.deadline = sent.Add(r.remaining - l.margin)
				l.nextDue = sent.Add(l.renewEvery)
				l.expiresAt = r.expiresAt
				l.capped = r.capped
				l.lastErr = nil
				if l.timer != nil { // nil only until add arms it, with this deadline
					l.timer.Reset(max(time.Until(l.deadline), 0))
				}
			}
			l.mu.Unlock()
		case "busy":
			l.mu.Lock()
			l.nextDue = time.Now().Add(retryDelay(l.renewEvery))
			l.mu.Unlock()
			if strict && firstErr == nil {
				firstErr = &BusyError{Namespace: l.ns, Key: l.key, Token: l.token}
			}
		default:
			if !h.registered(l) {
				// Being released or finished: not a loss. A renewal by
				// hand (strict) still says it renewed nothing.
				if strict && firstErr == nil {
					if firstErr = l.ended(); firstErr == nil {
						firstErr = ErrReleased
					}
				}
				continue
			}
			lost := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonTaken,
				Cause: &StaleTokenError{Namespace: l.ns, Key: l.key, Token: l.token}}
			l.mu.Lock()
			if l.capped || (!l.hardAt.IsZero() && !time.Now().Before(l.deadline)) {
				lost.Reason, lost.Cause = reasonHardTTL, ErrHardTTL
			}
			l.mu.Unlock()
			l.end(lost)
			if firstErr == nil {
				firstErr = lost
			}
		}
	}
	return firstErr
}

// retryDelay is the pause before retrying a failed or skipped renewal.
func retryDelay(every time.Duration) time.Duration {
	return max(min(every/4, 250*time.Millisecond), time.Millisecond)
}
