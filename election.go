package sentinel

// This file: the Elector API: Leader, Member, ElectorOptions and its callbacks, Client.Elector, the Elector's methods, Client.Leader, Members and VerifyTerm (the protocol and its state diagram: election_sql.go; the run loop: election_run.go).

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoLeader reports that an election group has no live leader.
var ErrNoLeader = errors.New("sentinel: no leader")

// Leader describes the current leader of an election group, as recorded in
// the group's leadership row.
type Leader struct {
	Namespace  string
	Group      string
	Owner      string
	Host       string
	PID        int
	AppVersion string
	Term       int64     // the term's fencing token
	ElectedAt  time.Time // database clock
	ExpiresAt  time.Time // database clock, as of the leader's last renewal
}

// Member describes one running elector of a group.
type Member struct {
	Namespace  string
	Group      string
	Owner      string
	Host       string
	PID        int
	AppVersion string
	StartedAt  time.Time // database clock: when this elector joined
	LastPoll   time.Time // database clock: its last campaign or heartbeat
	ExpiresAt  time.Time // database clock: it drops out of Members after this
	Leader     bool      // it holds the group's unexpired leadership row
}

// CallbackPanicError reports a panic in an elector callback. Run returns it
// after ending leadership. Run may be called again on the same Elector: it
// starts afresh, with the same callbacks; to run a fixed callback, create a
// new Elector with it.
type CallbackPanicError struct {
	Callback string // "OnElected", "OnDemoted", "OnNewLeader" or "OnPoll"
	Value    any    // the value passed to panic
	Stack    []byte // the panicking goroutine's stack
}

func (e *CallbackPanicError) Error() string {
	return fmt.Sprintf("sentinel: elector callback %s panicked: %v (leadership was given up; fix the callback, "+
		"then create a new Elector with it (callbacks are fixed at Client.Elector); Run on this one campaigns again "+
		"with the same callbacks)", e.Callback, e.Value)
}

// Unwrap returns the panic value when it is an error.
func (e *CallbackPanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// ElectorOptions configures an Elector. The zero value is valid: an
// elector without callbacks is useful through IsLeader and Term.
type ElectorOptions struct {
	// TTL is the leadership lease: after a leader dies a follower takes
	// over within TTL (plus the time of one statement). Renewed every
	// min(Config.HeartbeatInterval, TTL/3). Same bounds as a lease's TTL.
	// Default Config.DefaultTTL.
	TTL time.Duration

	// Namespace isolates groups of different systems. Default
	// Config.Namespace.
	Namespace string

	// AppVersion is shown in Leader and Members: at most MaxOwnerLen bytes
	// of UTF-8 without NUL. Default "".
	AppVersion string

	// OnElected runs on its own goroutine when this elector becomes leader,
	// with the term (a fencing token: guard writes with VerifyTerm). Its ctx
	// is cancelled at the leader's local deadline (before any other elector
	// can be elected), on Resign, when Run's ctx ends, when the client
	// closes (Client.Close), or when a callback panics (Run then returns a
	// *CallbackPanicError); it must return
	// promptly then: Run waits for it before giving leadership up, so a
	// graceful handover never overlaps. Returning early does not end the
	// term: the elector goes on leading, with no leader work running, and
	// no follower takes over; to hand leadership over, call Resign with
	// this ctx, then return. It starts only after OnDemoted of this
	// elector's previous term returned; a term that ends before that
	// (OnDemoted still running) gets neither OnElected nor OnDemoted.
	OnElected func(ctx context.Context, term int64)

	// OnDemoted is called when a term of this elector ended, after
	// OnElected returned, and before OnElected of its next term starts.
	// Never called for an elector that did not lead. It comes after the
	// term's release (or, for a lost term, after trying it until the
	// term's expiry), so another elector may lead by then: it is no signal
	// to stop work done as leader. That stops when OnElected's ctx ends.
	OnDemoted func(term int64)

	// OnNewLeader is called once per term led by another elector, when this
	// elector first sees it.
	OnNewLeader func(Leader)

	// OnPoll is called after each campaign and, while leading, after each
	// renewal interval. Calls are coalesced when the previous one is still
	// running: one more call follows it, however many were due meanwhile.
	OnPoll func()

	// OnPoll, OnNewLeader and OnDemoted run in order on one goroutine of
	// their own, never on Run's loop: one that blocks delays the others,
	// not the election. Run waits for the calls already queued before it
	// returns (see Elector.Run).
}

// Elector campaigns for the leadership of one group. Create it with
// Client.Elector and start it with Run. Its methods are safe for concurrent
// use, and any callback may call Resign or cancel Run's ctx.
type Elector struct {
	c     *Client
	group string
	ns    string
	ttl   time.Duration
	opts  ElectorOptions
	sql   *electionSQL

	running atomic.Bool
	// lockedBackoffs counts the follower's sleeps on an expired row it
	// could not take, locked by another transaction (Run's backoff); tests
	// read it (ElectorLockedBackoffs).
	lockedBackoffs atomic.Int64
	// waitBackoffs counts the follower's sleeps after a registration as
	// waiting (sqlElectionWait) that registered nothing, the row locked by
	// another transaction for longer than it waited for it, or an error
	// (Run's backoff); tests read it (ElectorWaitBackoffs).
	waitBackoffs atomic.Int64

	mu       sync.Mutex
	term     *term     // the current term; nil while following
	member   *Lease    // this run's member row; nil before joining
	started  time.Time // member row's started_at (database clock)
	lastPoll time.Time // last campaign (database clock)
	holdOff  time.Time // after Resign: do not campaign before this (local clock)
	led      int64     // the last term this elector led
	panicErr error     // the first callback panic
	panicked chan struct{}

	rejoining bool           // a member row rewrite runs in the background
	bg        sync.WaitGroup // that rewrite

	// unreleased is the last term this elector stepped down from whose
	// release failed (0: none): Resign retries it. A later term clears it.
	unreleased int64
}

// term is one term this elector leads.
type term struct {
	lease    *Lease
	resign   chan struct{} // closed by Resign
	resigned sync.Once
	stepping atomic.Bool   // leadership being given up: IsLeader is false
	ended    chan struct{} // closed once the term was released
	// releaseErr is why the release of a term this elector stepped down
	// from failed (nil: released, or lost before): Resign returns it. Set
	// before ended is closed.
	releaseErr error
	// lostErr says the term was lost (expired or taken over) before its
	// release reached it, matching ErrLeaseLost, as TermChange.Err does:
	// Resign returns it when the release did not fail. Set before ended
	// is closed.
	lostErr error
}

// electedKey marks OnElected's ctx, so Resign called with it does not wait
// for the handover that waits for OnElected.
type electedKey struct{}

// running electors per client, namespace and group: one at a time.
var runningElectors sync.Map // electorID -> struct{}

type electorID struct {
	c         *Client
	ns, group string
}

// Elector returns an elector for group (a name like a lease key). It does
// not touch the database; call Run.
func (c *Client) Elector(group string, opts ElectorOptions) (*Elector, error) {
	var ropts []Option
	if opts.TTL != 0 {
		ropts = append(ropts, WithTTL(opts.TTL))
	}
	if opts.Namespace != "" {
		ropts = append(ropts, WithNamespace(opts.Namespace))
	}
	if opts.TTL < 0 {
		return nil, invalid("TTL", "must be from MinTTL (%s) to MaxTTL (%s), or zero for Config.DefaultTTL, got %s", MinTTL, MaxTTL, opts.TTL)
	}
	o, err := c.resolveGroup(group, ropts, nil)
	if err != nil {
		return nil, err
	}
	if len(opts.AppVersion) > MaxOwnerLen {
		return nil, invalid("AppVersion", "is %d bytes, the limit is %d", len(opts.AppVersion), MaxOwnerLen)
	}
	if err := checkText("AppVersion", opts.AppVersion); err != nil {
		return nil, err
	}
	return &Elector{c: c, group: group, ns: o.namespace, ttl: o.ttl, opts: opts, sql: c.electionSQL()}, nil
}

// resolveGroup is resolve for a group: a group is checked as a key is, and
// an invalid one is reported as the group (InvalidError.Field "group"),
// the name the caller gave, not as a key.
func (c *Client) resolveGroup(group string, opts []Option, refuse refusal) (callOptions, error) {
	o, err := c.resolve(group, opts, refuse)
	var inv *InvalidError
	if errors.As(err, &inv) && inv.Field == "key" {
		inv.Field = "group"
	}
	return o, err
}

// Group returns the elector's group.
func (e *Elector) Group() string { return e.group }

// IsLeader reports whether this elector leads now: it holds a term whose
// local deadline has not passed and that is not being given up.
func (e *Elector) IsLeader() bool { return e.Term() != 0 }

// Term returns the current term (a fencing token) while this elector
// leads, else 0. Guard writes with Client.VerifyTerm.
func (e *Elector) Term() int64 {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || t.stepping.Load() {
		return 0
	}
	if t.lease.ended() != nil || !time.Now().Before(t.lease.Deadline()) {
		return 0
	}
	return t.lease.token
}

// Status returns this elector's own member record, as of its last
// statements. Leader is IsLeader.
func (e *Elector) Status() Member {
	e.mu.Lock()
	m := Member{
		Namespace: e.ns, Group: e.group, Owner: e.c.cfg.Owner, Host: e.c.cfg.Host, PID: e.c.cfg.PID,
		AppVersion: e.opts.AppVersion, StartedAt: e.started, LastPoll: e.lastPoll,
	}
	member := e.member
	e.mu.Unlock()
	if member != nil && member.ended() == nil {
		m.ExpiresAt = member.ExpiresAt()
		if seen := m.ExpiresAt.Add(-e.ttl); seen.After(m.LastPoll) {
			m.LastPoll = seen
		}
	}
	m.Leader = e.IsLeader()
	return m
}

// Resign steps down now, if this elector leads: OnElected's ctx is
// cancelled, and once OnElected returned the term is released in one
// round trip that also wakes the followers (the release commits, then the
// wake-up is sent), so one of them takes over within milliseconds. This elector does not campaign again until it has seen
// another leader, or for one TTL. Resign
// waits for the release unless ctx ends first; called with OnElected's ctx
// (or a ctx derived from it) it only requests the handover and returns nil,
// since the handover waits for OnElected to return. It returns nil when
// this elector does not lead. A nil ctx is refused (ErrInvalid) and the
// term left as it was.
//
// It returns an error matching ErrLeaseLost when the term had been lost
// (its local deadline passed, or it expired or was taken over) before the
// release reached it, as TermChange.Err and Observer.LeaseLost say then,
// and as Lease.Release does for a lease: OnElected's work may have
// overlapped the next leader's. The elector has stepped down all the
// same; there is nothing to retry.
//
// When the release statement fails (the database unreachable, the
// connection dropped) it is tried once more, so a release whose reply
// alone was lost is found done. If that fails too, Resign returns the
// error: the elector has stepped down all the same (IsLeader is false,
// OnElected's ctx ended), but the term stays live in the database, and
// the followers take over when it expires, within its TTL. Resign may
// then be called again: it retries the release of that term and returns
// nil once the term is no longer live (released now, or by the failed
// attempt after all, or expired). The same holds for a release that
// failed when Run's ctx ended, Client.Close ended the term, or a callback
// panicked.
func (e *Elector) Resign(ctx context.Context) error {
	if err := checkCtx("Elector.Resign", ctx); err != nil {
		return err
	}
	e.mu.Lock()
	t := e.term
	if t != nil {
		e.holdOff = time.Now().Add(e.ttl)
	}
	unreleased := e.unreleased
	e.mu.Unlock()
	if t == nil {
		if unreleased == 0 {
			return nil
		}
		return e.retryRelease(ctx, unreleased)
	}
	t.stepping.Store(true)
	t.resigned.Do(func() { close(t.resign) })
	if ctx.Value(electedKey{}) == e {
		return nil
	}
	select {
	case <-t.ended:
		if t.releaseErr != nil {
			return t.releaseErr
		}
		return t.lostErr
	case <-ctx.Done():
		return fmt.Errorf("sentinel: resign %q/%q: handover not finished (OnElected still running?): %w", e.ns, e.group, context.Cause(ctx))
	}
}

// retryRelease runs the release of term, a term this elector stepped down
// from whose release failed, again (see Resign).
func (e *Elector) retryRelease(ctx context.Context, term int64) error {
	if err := e.resign(ctx, term); err != nil {
		return e.releaseFailed(term, err)
	}
	e.mu.Lock()
	if e.unreleased == term {
		e.unreleased = 0
	}
	e.mu.Unlock()
	return nil
}

// releaseFailed is the error of a failed release of term.
func (e *Elector) releaseFailed(term int64, err error) error {
	return fmt.Errorf("sentinel: resign %q/%q: releasing term %d failed; this elector stepped down, but the term "+
		"stays live until it expires (within its TTL, %s) unless the release committed: call Resign again to retry: %w",
		e.ns, e.group, term, e.ttl, err)
}

func (e *Elector) recordPanic(name string, v any) {
	perr := &CallbackPanicError{Callback: name, Value: v, Stack: debug.Stack()}
	e.c.cfg.Logger.Error("sentinel: elector callback panicked; stopping the elector", "group", e.group, "callback", name, "panic", v)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.panicErr == nil {
		e.panicErr = perr
		close(e.panicked)
	}
}

// callbacks runs OnPoll, OnNewLeader and OnDemoted in order on one
// goroutine of their own, so the Run loop never waits for them and they may
// call Resign or cancel Run's ctx freely. Run waits for the queue to drain
// before it returns.
type callbacks struct {
	e          *Elector
	mu         sync.Mutex
	queue      []func()
	pollQueued bool // an OnPoll is queued
	// lastDemoted is closed once the last OnDemoted queued returned (nil:
	// none queued); the next OnElected waits for it. Run's goroutine only.
	lastDemoted chan struct{}
	wake        chan struct{}
	quit        chan struct{}
	done        chan struct{}
}

func newCallbacks(e *Elector) *callbacks {
	cb := &callbacks{e: e, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go cb.loop()
	return cb
}

func (cb *callbacks) push(f func(), isPoll bool) {
	cb.mu.Lock()
	if isPoll {
		if cb.pollQueued {
			cb.mu.Unlock()
			return
		}
		cb.pollQueued = true
	}
	cb.queue = append(cb.queue, f)
	cb.mu.Unlock()
	select {
	case cb.wake <- struct{}{}:
	default:
	}
}

func (cb *callbacks) poll() {
	if f := cb.e.opts.OnPoll; f != nil {
		cb.push(func() {
			cb.mu.Lock()
			cb.pollQueued = false
			cb.mu.Unlock()
			cb.call("OnPoll", f)
		}, true)
	}
}

func (cb *callbacks) newLeader(l Leader) {
	if o := cb.e.c.observer(); o != nil && o.TermChanged != nil {
		o.TermChanged(TermChange{Namespace: cb.e.ns, Group: cb.e.group, Term: l.Term, Leader: l.Owner})
	}
	if f := cb.e.opts.OnNewLeader; f != nil {
		cb.push(func() { cb.call("OnNewLeader", func() { f(l) }) }, false)
	}
}

// demoted reports the end of term; call is false for a term whose
// OnElected never started (see Elector.lead): it gets no OnDemoted either.
// lost is why the term ended against this node's will (TermChange.Err),
// nil when it stepped down itself.
func (cb *callbacks) demoted(term int64, call bool, lost error) {
	if o := cb.e.c.observer(); o != nil && o.TermChanged != nil {
		o.TermChanged(TermChange{Namespace: cb.e.ns, Group: cb.e.group, Term: term, Leader: cb.e.c.cfg.Owner, Self: true, Demoted: true,
			Err: lost})
	}
	if f := cb.e.opts.OnDemoted; f != nil && call {
		done := make(chan struct{})
		cb.lastDemoted = done
		cb.push(func() {
			defer close(done)
			cb.call("OnDemoted", func() { f(term) })
		}, false)
	}
}

func (cb *callbacks) call(name string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			cb.e.recordPanic(name, v)
		}
	}()
	f()
}

func (cb *callbacks) loop() {
	defer close(cb.done)
	for {
		cb.mu.Lock()
		var f func()
		if len(cb.queue) > 0 {
			f = cb.queue[0]
			cb.queue = cb.queue[1:]
		}
		cb.mu.Unlock()
		if f != nil {
			f()
			continue
		}
		select {
		case <-cb.wake:
		case <-cb.quit:
			cb.mu.Lock()
			empty := len(cb.queue) == 0
			cb.mu.Unlock()
			if empty {
				return
			}
		}
	}
}

// stop lets the queued callbacks run and waits for them.
func (cb *callbacks) stop() {
	close(cb.quit)
	<-cb.done
}

// Leader returns the current leader of group, or an error matching
// ErrNoLeader when it has none (never elected, resigned, or expired by the
// database clock). Options: WithNamespace. A nil ctx is refused (ErrInvalid).
func (c *Client) Leader(ctx context.Context, group string, opts ...Option) (*Leader, error) {
	if err := checkCtx("Client.Leader", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveGroup(group, opts, onlyTakes("Leader", 0))
	if err != nil {
		return nil, err
	}
	l := Leader{Namespace: o.namespace, Group: group}
	err = c.pool.QueryRow(ctx, c.electionSQL().leader, o.namespace, group).
		Scan(&l.Owner, &l.Host, &l.PID, &l.AppVersion, &l.Term, &l.ElectedAt, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sentinel: election %q/%q has no leader now (wait for an elector to win; see Members): %w", o.namespace, group, ErrNoLeader)
	}
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read leader of %q/%q", o.namespace, group), err)
	}
	return &l, nil
}

// Members returns the live electors of group (their member rows have not
// expired by the database clock), oldest first. Leader is set on the one
// that holds the group's unexpired leadership row. Options: WithNamespace.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Members(ctx context.Context, group string, opts ...Option) ([]Member, error) {
	if err := checkCtx("Client.Members", ctx); err != nil {
		return nil, err
	}
	o, err := c.resolveGroup(group, opts, onlyTakes("Members", 0))
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.electionSQL().members, o.namespace, group)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read members of %q/%q", o.namespace, group), err)
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
		m := Member{Namespace: o.namespace, Group: group}
		err := r.Scan(&m.Owner, &m.Host, &m.PID, &m.AppVersion, &m.StartedAt, &m.LastPoll, &m.ExpiresAt, &m.Leader)
		return m, err
	})
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read members of %q/%q", o.namespace, group), err)
	}
	return ms, nil
}

// VerifyTerm checks, inside the caller's transaction, that term is the
// current, unexpired term of group, and returns a *StaleTokenError
// (matching ErrStaleToken) otherwise. It locks the group's leadership row
// (FOR KEY SHARE) until the transaction ends, so no new term can begin
// before the caller's guarded writes commit, while the leader's own renewals
// go on:
//
//	tx, _ := pool.Begin(ctx)
//	if err := client.VerifyTerm(ctx, tx, "scheduler", term); err != nil {
//		tx.Rollback(ctx) // this term is over (expired, resigned or taken over): write nothing
//		return err
//	}
//	tx.Exec(ctx, "INSERT INTO runs ...")
//	tx.Commit(ctx)
//
// A guarded transaction holds off the next election for as long as it is
// open, so keep it short. Unless the session sets
// idle_in_transaction_session_timeout itself,
// VerifyTerm bounds the transaction's idle time to the term's TTL (SET
// LOCAL), so a leader frozen or cut off in the middle of it cannot block
// the next election for longer (PostgreSQL caps that setting at about 24.8
// days, 2^31-1 ms: a longer TTL bounds it to that). The TTL is the one the
// term was last renewed with, read from its row, so an Elector's own TTL
// applies without repeating it here. Options: WithNamespace, WithTTL (a
// bound of the caller's choosing instead).
// A nil ctx is refused (ErrInvalid).
func (c *Client) VerifyTerm(ctx context.Context, q Querier, group string, term int64, opts ...Option) error {
	if err := checkCtx("Client.VerifyTerm", ctx); err != nil {
		return err
	}
	if q == nil {
		return invalid("querier", "must not be nil")
	}
	o, err := c.resolveGroup(group, opts, onlyTakes("VerifyTerm", takesTTL))
	if err != nil {
		return err
	}
	if term <= 0 {
		return invalid("term", "must be positive, got %d", term)
	}
	var current int64
	var alive bool
	var set *string
	bound := "" // the term's own TTL, read from its row
	if o.ttlSet {
		bound = fmt.Sprintf("%dms", min(max(o.ttl.Milliseconds(), 1), maxIdleTimeoutMs))
	}
	err = q.QueryRow(ctx, c.electionSQL().verifyTm, o.namespace, group, bound, term).
		Scan(&current, &alive, &set)
	if errors.Is(err, pgx.ErrNoRows) {
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: group, Token: term})
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("verify term of %q/%q", o.namespace, group), err)
	}
	if current != term || !alive {
		if !alive {
			current = 0
		}
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: group, Token: term, Current: current})
	}
	return nil
}
