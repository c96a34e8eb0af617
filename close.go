package sentinel

// This file: Client.Close, read top to bottom: it ends the waits and the held leases and turns, then releases the leases in one statement, retried after a transient error (releaseAll); then closeGiveBack (the context its give-backs share), checkOpen, and the bookkeeping of the waits it ends (beginWait, endWait, endWaits).

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Close stops heartbeats, releases every lease the client still holds (not
// one handed on with Lease.Detach, which its receiver holds; an
// execution lease held by a running Once ends, cancelling fn's context,
// and so does the lease of a running Do, whose error then matches
// ErrLeaseLost and ErrClosed), gives back the tickets of the turns it
// holds (their Err is then ErrReleased) and ends the terms of its
// Electors, waiting, within its deadline, for each to be released by its
// Run once OnElected returned (Run then returns ErrClosed; Close does not
// wait for OnDemoted nor for Run itself to return: see Elector.Run),
// ends the waits under way, of Lease, of Turn and of Once with WithWait
// (they withdraw, give their ticket up, or count out of the claim they
// waited for, and return ErrClosed) and closes the listener connection.
//
// Close returns within one Config.ReleaseTimeout from the call (plus local
// work), whatever the database does, an outage that drops packets
// included: the waits' end, the releases and give-backs (of leases, and of
// turns' tickets), the wake-ups of handovers and the listener's close run
// to one deadline, the waits' end beside the releases. A termination grace
// period a little longer than ReleaseTimeout covers it. What is not done
// by then: a release or give-back expires within its TTL; a wait still
// withdrawing goes on after Close, within a ReleaseTimeout of its own (if
// the pool is closed meanwhile, its registration expires within the
// waiter's TTL, and a release may hand it the key until then); a wake-up
// not sent is a hint waiters do without. The give-backs of draws cut off
// as their callers' ctx ended (see Client.Turn), running in the
// background, make their last look at once and are waited for until that
// same deadline; one still running then is cancelled (its ticket, if any,
// expires within its TTL; the failure is logged and reported to
// Observer.ReleaseFailed). A Turn's draw in flight as Close begins is
// waited for until that same deadline too: a ticket it draws then is given
// back (the Turn returns ErrClosed) before Close returns, not after, when
// the caller may have closed the pool; one still in flight at the
// deadline gives its ticket back on its own, after Close returned. A
// Lease.Release or Turn.Release under way on another goroutine (a deferred one racing Close) is waited for until that
// same deadline: the lease or turn is that Release's, which Close neither
// releases again nor reports; one still running then is left to end it by
// its own ctx (Done closes when its statement returns), and Close returns.
// When the database answers, the waits withdraw before Close returns, so
// before the caller closes the pool.
//
// Each release and give-back is retried after a transient
// error (a dropped connection, a restarting server), within that time,
// but not while the database cannot be reached at all: Close does not
// wait out an outage. A lease or turn Close gave back reads
// as released (Err returns ErrReleased); one it could not give back as
// a failed release (matching ErrClosed, reported to
// Observer.ReleaseFailed); one whose row was gone before Close (taken
// over or expired) as lost. A lease whose release committed but whose
// reply was lost, so that the retry found its row freed already, reads as
// released when that first attempt was sent before the lease's local
// deadline and the row still carries its grant (nobody was granted the key
// since); one granted to someone since (a waiter after the lost reply, or
// a takeover with WithForce) reads as a failed release. A turn's ticket
// found gone by a retry reads as released when the ticket's record in the
// queue's history says the failed attempt gave it up while it was live. An elector's term is not released by Close
// but by its Run, once OnElected returned (Run then returns ErrClosed,
// joined with the release's error if it failed); Close waits for that
// release until its deadline, so a process that exits after Close does
// not leave its term live for a TTL (unless OnElected outlives the
// deadline, or Close is called from OnElected itself). Wait for Run to
// return before closing the pool. It does not close the pool. Close is
// idempotent; later calls on the client return ErrClosed.
func (c *Client) Close() {
	c.once.Do(func() {
		c.closed.Store(true)
		held := c.hb.stop()
		if c.testAfterStop != nil {
			c.testAfterStop()
		}
		// One deadline for all Close does: the waits' end, the releases
		// and give-backs, the wake-ups and the listener. The waits ended
		// before the releases began, each with a ReleaseTimeout of its
		// own, so in an outage in which packets are dropped (a
		// withdrawal hanging on a dead connection) Close took two, and
		// a pod's grace period sized by ReleaseTimeout ran out mid-Close.
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ReleaseTimeout)
		defer cancel()
		c.closeCtx.Store(&ctx)
		// The waits end beside the releases, not before them: a
		// withdrawal stuck on a dead connection leaves the releases the
		// rest of the pool and the whole deadline. A grant a wait reads
		// meanwhile (one of these releases' included) is given back:
		// hb.add fails once hb stopped.
		waitsEnded := make(chan struct{})
		go func() {
			defer close(waitsEnded)
			c.endWaits(ctx)
		}()
		var leases, others, busy []*Lease
		for _, l := range held {
			if l.kind != kindLease {
				others = append(others, l)
				continue
			}
			// Release the leases below holding their release locks; one
			// whose lock is held has a Release under way (or a Detach),
			// waited for beside them until ctx ends (releaseAfter).
			if !l.relMu.tryLock() {
				busy = append(busy, l)
				continue
			}
			defer l.relMu.Unlock()
			if l.endByClose() {
				leases = append(leases, l)
			}
		}
		// The others end together, and the Releases under way are waited
		// for beside them: ending a turn gives its ticket back,
		// a statement bounded by ReleaseTimeout, and N of them one after
		// the other took N x ReleaseTimeout when the server was slow.
		// Bounded by the pool's size, as they would queue for it anyway,
		// and all by ctx (closeGiveBack): one ReleaseTimeout in all.
		ending := make(chan struct{})
		go func() {
			defer close(ending)
			var wg sync.WaitGroup
			for _, l := range busy {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c.releaseAfter(ctx, l)
				}()
			}
			// The give-backs of draws cut off as their callers' ctx
			// ended, running in the background (giveBackDraw), make their
			// last look now and are waited for beside the others, and so
			// are the Turns' draws in flight (Client.draw), which give
			// back a ticket drawn now.
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.cut.close(ctx)
			}()
			// The Electors' terms, ended below (others), are released
			// by their Runs once OnElected returned: waited for too, so
			// that a main that returns after Close hands leadership
			// over at once, not a TTL later.
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.terms.close(ctx, nil)
			}()
			sem := make(chan struct{}, max(1, int(c.pool.Config().MaxConns)))
			for _, l := range others {
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer func() { <-sem; wg.Done() }()
					if l.onClose != nil { // a turn: released as a lease is (Turn.endByClose)
						l.onClose()
						return
					}
					l.end(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonClosed, Cause: ErrClosed})
				}()
			}
			wg.Wait()
		}()
		c.releaseAll(ctx, leases)
		<-ending
		<-waitsEnded
		c.flushWakes(ctx) // the wake-ups of handovers made before Close
		c.ln.close(ctx)
	})
}

// endByClose ends l as released by Close, unless it ended already (a
// Release, Detach, its deadline), and reports whether it did: before the
// release frees the key, so that its holder's Done closes before anyone
// else can be granted it (releaseAll reports one it did not free as lost).
// Called holding l's release lock (a ticket's: its Turn's).
func (l *Lease) endByClose() bool {
	if l.ended() != nil {
		return false
	}
	l.mu.Lock()
	l.byClose = true
	l.mu.Unlock()
	l.end(ErrReleased)
	return true
}

// releaseAfter waits, until ctx ends (Close's deadline), for the holder
// of l's release lock: a Release under way on another goroutine (or a
// Detach), whose outcome is the lease's. One still running then is left
// to finish the lease by its own ctx: Close neither releases it again nor
// reports it, and returns. A lease still held once the lock is had (every
// holder ends it: not expected) is released as Close's others are.
func (c *Client) releaseAfter(ctx context.Context, l *Lease) {
	if !l.relMu.lockCtx(ctx) {
		return
	}
	defer l.relMu.Unlock()
	if l.endByClose() {
		c.releaseAll(ctx, []*Lease{l})
	}
}

// releaseAll releases leases, which Close ended as released, in one
// statement (sqlReleaseMany), within ctx (Close's one ReleaseTimeout).
// Close calls it holding the leases' relMu.
//
// A transient failure (a dropped connection, a restarting server; see
// transient) is retried, as every other give-back is (retryWithin), for
// the leases not yet known to be freed, 100 ms apart, each until its
// local expiry; not when the database cannot be reached at all, as Close
// must not wait out an outage. One dropped connection used to leave every
// key held, by nobody, until it expired, a TTL, its waiters asleep.
//
// A retry that does not find a lease's row live has two readings: an
// earlier attempt freed it, its reply lost (the statement committed, the
// connection dropped before the answer came), or the row was gone before
// Close (taken over, released or expired), a loss. When an earlier attempt
// that included it failed, having been sent before the lease's local
// deadline, the retry reads the row, as Lease.Release does in the same
// case (sqlLeaseUntaken): if it still carries the lease's grant, nobody
// was granted the key since, and the lease reads as released (the
// wake-up the lost reply would have sent is sent, a spare NOTIFY when the
// key has no waiter); if someone was granted it since, that may be a
// waiter served after the lost reply or a forced takeover (WithForce)
// before Close, the holder's work overlapping the new holder's, and not
// knowing which, the lease reads as a failed release, as it did before
// the retry. Otherwise (no attempt failed before, or the lease was past
// its local deadline already when Close sent it) it reads as lost.
//
// A lease whose row the first answered attempt did not find was gone
// before Close: a loss, whose error does not match ErrClosed. One not
// freed when the attempts end (the database unreachable, ReleaseTimeout
// or the lease's local expiry reached) is a failed release, reported to
// Observer.ReleaseFailed; its row expires by itself, unless its holder's
// Release frees it.
func (c *Client) releaseAll(ctx context.Context, leases []*Lease) {
	if len(leases) == 0 {
		return
	}
	type pending struct {
		l                *Lease
		deadline, expiry time.Time // local: the lease's deadline, and its row's expiry
		// sentLive: an attempt that failed was sent before deadline;
		// answered: an attempt answered for it (released: freed, by it
		// or by such an earlier attempt; otherwise lost).
		sentLive, answered, released bool
		// unknown: answered, not found, after a failed attempt, and the
		// row granted to someone since: freed by that attempt or taken
		// over, not known which (a failed release).
		unknown bool
	}
	ps := make([]*pending, len(leases))
	var last time.Time // the latest local expiry: no retry after it
	for i, l := range leases {
		ps[i] = &pending{l: l, deadline: l.Deadline(), expiry: l.localExpiry()}
		if ps[i].expiry.After(last) {
			last = ps[i].expiry
		}
	}
	var prevErr error
	first := true
	err := c.retryWithin(ctx, last, "close: releasing leases", func(ctx context.Context) error {
		var batch []*pending
		now := time.Now()
		for _, p := range ps {
			// The first attempt includes every lease, as before: one
			// past its local expiry may still be live by the database's
			// clock. After it, there is nothing left to free.
			if !p.answered && (first || now.Before(p.expiry)) {
				batch = append(batch, p)
			}
		}
		first = false
		if len(batch) == 0 {
			return errNoneLeft // not transient: the loop ends (err is prevErr then)
		}
		nss, keys, tokens := make([]string, len(batch)), make([]string, len(batch)), make([]int64, len(batch))
		// newest: the newest token of each key in the batch. A row freed
		// names its key, not its token, and the client may hold two
		// grants of one key (it took its own key over with WithForce,
		// the older lease not told yet): only the newest can still be on
		// the row (every grant mints a greater token), so a freed key is
		// that one's; the older one was taken over.
		newest := make(map[[2]string]int64, len(batch))
		for i, p := range batch {
			nss[i], keys[i], tokens[i] = p.l.ns, p.l.key, p.l.token
			if k := [2]string{p.l.ns, p.l.key}; p.l.token > newest[k] {
				newest[k] = p.l.token
			}
		}
		freed := make(map[[2]string]bool, len(batch))
		var wakes []string
		sent := time.Now()
		rows, err := c.pool.Query(ctx, c.sql.releaseN, nss, keys, tokens, c.cfg.Owner)
		if err == nil {
			for rows.Next() {
				var ns, key, wake string
				if err = rows.Scan(&ns, &key, &wake); err != nil {
					break
				}
				freed[[2]string{ns, key}] = true
				wakes = append(wakes, wake)
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			// Rows read before the failure are not trusted: the
			// statement may not have committed. The next attempt frees
			// them, or finds them freed.
			for _, p := range batch {
				if sent.Before(p.deadline) {
					p.sentLive = true
				}
			}
			prevErr = err
			return err
		}
		var maybe []*pending // not found after a failed attempt: perhaps its doing
		for _, p := range batch {
			switch k := [2]string{p.l.ns, p.l.key}; {
			case freed[k] && p.l.token == newest[k]:
				p.answered, p.released = true, true
			case p.sentLive:
				maybe = append(maybe, p)
			default:
				p.answered = true // gone before Close: a loss
			}
		}
		if len(maybe) > 0 {
			// Freed by an earlier attempt, its reply lost, only if the row
			// still carries the lease's grant (sqlLeaseUntaken, which
			// Lease.Release reads in the same case): nobody was granted
			// the key since. A row granted to someone else may have been
			// taken over before Close (WithForce), the holder's work
			// overlapping the new holder's: that must not read as
			// released. Not known either way, it stays a failed release,
			// as Lease.Release's own would.
			b := &pgx.Batch{}
			for _, p := range maybe {
				b.Queue(c.sql.untaken, p.l.ns, p.l.key, c.cfg.Owner, p.l.token)
			}
			br := c.pool.SendBatch(ctx, b)
			untaken := make([]bool, len(maybe))
			var rerr error
			for i := range maybe {
				if rerr = br.QueryRow().Scan(&untaken[i]); rerr != nil {
					break
				}
			}
			if cerr := br.Close(); rerr == nil {
				rerr = cerr
			}
			if rerr != nil {
				// Read again by the next attempt, if any.
				c.wake("", wakes...)
				rerr = c.wrapErr("read leases after a failed release", rerr)
				prevErr = rerr
				return rerr
			}
			for i, p := range maybe {
				p.answered = true
				if untaken[i] {
					p.released = true
					wakes = append(wakes, payload(notifyLease, p.l.ns, p.l.key))
				} else {
					p.unknown = true
				}
			}
		}
		c.wake("", wakes...) // the schema's channel: a waiter of any process may take the key
		return nil
	}, "leases", len(leases))
	if err == nil || err == errNoneLeft {
		err = prevErr // the failure of the last attempt, for a lease past its expiry by then
	}
	failed := 0
	for _, p := range ps {
		l := p.l
		switch {
		case p.released:
			l.mu.Lock()
			l.freedByClose = true
			inDo := l.inDo
			l.mu.Unlock()
			if inDo {
				// fn's ctx was cancelled before the key was freed, but fn
				// may not have stopped yet: another may be granted the
				// key meanwhile, which Do's error will say.
				c.cfg.Logger.Warn("sentinel: close: released the lease of a running Do: fn's ctx is cancelled, but another holder "+
					"may be granted the key before fn stops (writes fenced by its token are refused, unfenced ones may overlap); "+
					"Do returns an error matching ErrLeaseLost and ErrClosed. To avoid this, let Do calls return before Close",
					l.logAttrs()...)
			}
		case p.answered && !p.unknown:
			// The row was gone before Close: lost while held (taken
			// over or expired), not ended by Close, so its error says
			// so and does not match ErrClosed (an observer tells
			// Close's own ends by it).
			l.notReleased(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonTaken,
				Cause: &StaleTokenError{Namespace: l.ns, Key: l.key, Token: l.token}}, false)
		default: // not freed: no loss (Observer.ReleaseFailed)
			failed++
			lf := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: reasonClosed, Cause: ErrClosed}
			if l.notReleased(lf, true); l.ended() == lf {
				// A failed release, as Lease.Release's own: a Release
				// that frees the row still carrying the token, or finds
				// it freed so (an attempt committed, its reply lost),
				// returns nil. Close holds l.relMu.
				l.relFailed = lf
			}
		}
	}
	if failed > 0 {
		c.cfg.Logger.Warn("sentinel: close: releasing leases failed; they expire by themselves", "leases", failed, "err", err)
	}
}

// errNoneLeft ends releaseAll's attempts when no lease is left to send (the
// rest answered, or past their local expiry): returning the last failure,
// transient, would have the loop send nothing every 100 ms until
// ReleaseTimeout or the latest expiry, an answered lease's perhaps.
var errNoneLeft = errors.New("sentinel: close: no lease left to release")

// closeGiveBack returns the context of a give-back Close makes: Close's
// own, so that every give-back ends by Close's one ReleaseTimeout, not
// ReleaseTimeout after it got a connection. Outside Close, a
// ReleaseTimeout of its own.
func (c *Client) closeGiveBack() (context.Context, context.CancelFunc) {
	if p := c.closeCtx.Load(); p != nil {
		return context.WithCancel(*p)
	}
	return context.WithTimeout(context.Background(), c.cfg.ReleaseTimeout)
}

func (c *Client) checkOpen() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// waitCount counts the lease waits of a client under way; idle, when set
// by Close, is closed once none is left.
type waitCount struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// beginWait counts a wait (Lease's, or Once's with WithWait) in, unless
// the client is closed.
func (c *Client) beginWait() bool {
	w := &c.waits
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.closed.Load() {
		return false
	}
	w.n++
	return true
}

// endWait counts a lease wait out, once it withdrew its registration.
func (c *Client) endWait() {
	w := &c.waits
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if w.n == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// endWaits wakes the waits under way (Lease's, and Once's with WithWait),
// which find the client closed and withdraw their registrations (a
// registration left behind would be handed the key by the next release,
// stranding it for the waiter's TTL; a Once waiter counts out of the claim
// it waited for), and waits for them until ctx ends (Close's deadline, one
// ReleaseTimeout in all): they must withdraw before the caller closes the
// pool. No wait begins once closed is set.
func (c *Client) endWaits(ctx context.Context) {
	w := &c.waits
	w.mu.Lock()
	var idle chan struct{}
	if w.n > 0 {
		idle = make(chan struct{})
		w.idle = idle
	}
	w.mu.Unlock()
	if idle == nil {
		return
	}
	c.ln.wakeAll()
	select {
	case <-idle:
	case <-ctx.Done():
	}
}
