package sentinel

// This file: The listener: a Client's subscriptions to wake-ups (lease releases, grants, turns, terms) and their payloads; the LISTEN connection itself is the hub's (listenhub.go).

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// listener routes notifications to one client's waiters. The connection
// that LISTENs is not its own: every Client of the process on the same pool
// and schema shares one (a listenHub), so a NOTIFY signals one backend per
// process rather than one per client, and reaches the one goroutine it
// names (a ticket, a key) through the hub's routing. A notification is a
// hint to re-check: the grant is decided (or read) by a statement. The one
// exception is a turn served by the leave ahead of it (notifyTurnServed):
// the leave sends it only after its grant committed (wake.go), so its
// waiter needs no statement to know; nothing but the server's payload
// ever signals that subscription.
// The hub starts with the first waiter and reconnects with backoff; while
// it is down waiters fall back to re-checking every Config.WaitRecheck. It
// retires when the process has not waited for Config.ListenIdleTimeout,
// and the next wait starts a new one.
type listener struct {
	c *Client

	mu      sync.Mutex
	waiters map[waitKey][]chan struct{} // per key, oldest first
	hub     *listenHub                  // nil until the first subscribe (and after close)
	closed  bool
}

// waitKey names what a waiter waits for: a kind of notification (see the
// notify* constants) about one key of one namespace.
type waitKey struct {
	kind    byte
	ns, key string
}

// Notification kinds, the first byte of a payload. A payload is
// "<kind><octet_length(namespace)>:<namespace><key>"; the length is in
// bytes, the unit the parser slices by, so any UTF-8 namespace and key
// round-trip.
const (
	notifyLease      byte = 'l' // a lease was released: wake one waiter
	notifyLeaseGrant byte = 'w' // a release handed a lease to the registration named by the key; "/<grant>" follows it (sqlRelease)
	notifyExecution  byte = 'e' // a Once key finished: wake every waiter
	notifyTurn       byte = 't' // a queue moved: the key is the one ticket that should re-check
	notifyTurnServed byte = 's' // a leave granted the ticket named by the key (committed before it was sent; never a mere hint)
	notifyQueue      byte = 'q' // a queue event was recorded (key ""): wake every follower
	// notifyElection ('g', election_sql.go): a leader resigned: wake every
	// follower of the group.
	// notifyElectionGrant ('h', election_sql.go): a resignation handed the
	// term to the elector whose member token is the key; "/<grant>"
	// follows it (sqlResignWake).
)

// carriesGrant reports whether a notification of kind names one waiter and
// carries what it was granted after its key ("<key>/<grant>"): the hub
// keeps those until the waiter takes them (listenHub.keep).
func carriesGrant(kind byte) bool {
	return kind == notifyLeaseGrant || kind == notifyElectionGrant
}

// broadcast reports whether a notification of kind wakes every waiter of
// its key (a result every waiter can use) rather than one (a grant only
// one waiter can win).
func broadcast(kind byte) bool {
	return kind == notifyExecution || kind == notifyQueue || kind == notifyElection
}

func newListener(c *Client) *listener {
	return &listener{c: c, waiters: make(map[waitKey][]chan struct{})}
}

// subscribe registers a waiter for (ns, key) and returns its wake channel and
// whether a notification can currently arrive.
func (ln *listener) subscribe(ctx context.Context, kind byte, ns, key string) (chan struct{}, bool) {
	ch := make(chan struct{}, 1)
	ln.mu.Lock()
	k := waitKey{kind, ns, key}
	ln.waiters[k] = append(ln.waiters[k], ch)
	if ln.c.cfg.DisableListen || ln.c.closed.Load() || ln.closed {
		ln.mu.Unlock()
		return ch, false
	}
	h := ln.hubLocked()
	ln.mu.Unlock()
	select { // wait for the first LISTEN so the caller's attempt is covered
	case <-h.ready:
	case <-ctx.Done():
	}
	return ch, h.isHealthy()
}

// hubLocked returns ln's hub for a wait or a draw that begins, joining
// the process's hub when ln has none or its hub retired (idle: see
// listenHub.watchIdle). ln.mu is held, so the wait's subscription and the
// hub's use are one step for a hub deciding whether ln waits.
func (ln *listener) hubLocked() *listenHub {
	if h := ln.hub; h != nil {
		if h.use() {
			return h
		}
		h.removeMember(ln)
	}
	ln.hub = joinHub(ln)
	return ln.hub
}

// waiting reports whether ln has a waiter subscribed.
func (ln *listener) waiting() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return len(ln.waiters) > 0
}

// direct returns the channel of this process's hub (listenHub.direct),
// empty when the client has none (it does not listen, or is closed): a
// waiter's registration records it so that its grant's wake-up is sent
// to this process alone. Call it after subscribe, which starts the hub.
func (ln *listener) direct() string {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.hub == nil || ln.closed {
		return ""
	}
	return ln.hub.direct
}

// subscribeTo registers ch, the wake channel of an existing subscription,
// for (kind, ns, key) too; drop removes it again without touching a wake-up
// ch may hold (it belongs to the other subscription as much).
//
// A grant's wake-up (a lease's or a term's) that arrived before the
// subscription (the hub keeps those, see listenHub.dispatch) wakes ch at
// once.
func (ln *listener) subscribeTo(kind byte, ns, key string, ch chan struct{}) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	k := waitKey{kind, ns, key}
	ln.waiters[k] = append(ln.waiters[k], ch)
	if carriesGrant(kind) && ln.hub != nil && ln.hub.isKept(k) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (ln *listener) drop(kind byte, ns, key string, ch chan struct{}) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	k := waitKey{kind, ns, key}
	list := ln.waiters[k]
	if i := slices.Index(list, ch); i >= 0 {
		list = slices.Delete(list, i, i+1)
	}
	if len(list) == 0 {
		delete(ln.waiters, k)
	} else {
		ln.waiters[k] = list
	}
}

// unsubscribe removes a waiter. A waiter that leaves holding an unconsumed
// wake-up (it gave up, or acquired by other means) passes it on to the next
// one, so a release is never lost with it.
func (ln *listener) unsubscribe(kind byte, ns, key string, ch chan struct{}) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	k := waitKey{kind, ns, key}
	list := ln.waiters[k]
	for i, c := range list {
		if c == ch {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(ln.waiters, k)
	} else {
		ln.waiters[k] = list
	}
	if ln.hub != nil {
		ln.hub.use() // the hub's idle time counts from the last wait's end
	}
	select {
	case <-ch:
		if !broadcast(kind) && kind != notifyTurnServed && !ln.wakeOneLocked(k) && ln.hub != nil {
			// No other waiter here: pass it on to another client of
			// the process (after our lock is released).
			h := ln.hub
			defer func() { go h.wakeOne(k, ln) }()
		}
	default:
	}
}

// notify wakes the oldest waiter for k that is not already awake. One
// release can grant one lease, so waking every waiter would only make them
// race for it; FIFO also keeps a waiter from starving behind newcomers in
// this process (the database still decides every grant).
func (ln *listener) notify(k waitKey) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if !broadcast(k.kind) {
		ln.wakeOneLocked(k)
		return
	}
	for _, ch := range ln.waiters[k] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// wakeOneLocked wakes the oldest waiter for k that is not already awake,
// and reports whether there was one.
func (ln *listener) wakeOneLocked(k waitKey) bool {
	for _, ch := range ln.waiters[k] {
		select {
		case ch <- struct{}{}:
			return true
		default: // already awake; try the next
		}
	}
	return false
}

// wakeOne wakes one waiter for k, if this client has one not awake yet.
func (ln *listener) wakeOne(k waitKey) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.wakeOneLocked(k)
}

// wakeAll wakes every waiter so it re-checks (used when the connection
// drops: notifications may have been missed). A served turn's subscription
// is not woken: it is not a hint but a fact the server sends (see
// notifyTurnServed), and its waiter also holds a subscription for
// re-checks, which this wakes.
func (ln *listener) wakeAll() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for k, list := range ln.waiters {
		if k.kind == notifyTurnServed {
			continue
		}
		for _, ch := range list {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// takeGrant returns the grant a wake-up of kind (notifyLeaseGrant for a
// lease registration, notifyElectionGrant for a member token) carried for
// key (see listenHub.keep), if the hub kept one, and forgets it.
func (ln *listener) takeGrant(kind byte, ns, key string) (string, bool) {
	ln.mu.Lock()
	h := ln.hub
	ln.mu.Unlock()
	if h == nil {
		return "", false
	}
	return h.claim(waitKey{kind, ns, key})
}

// beginDraw opens a draw window on the client's hub (see
// listenHub.beginDraw); without a hub (listening disabled, or the client
// closed) it opens none. A window that is not heard (the hub was not
// listening throughout) makes the waiter make its serving check.
//
// The first draw of a client starts its hub (as a waiter's subscription
// would): a turn served by its draw never subscribes, and the client's
// next contended draw needs the hub listening before it is sent.
//
// The window opens under ln.mu, with the hub's use: a hub deciding to
// retire looks at ln's waiters under the same lock, so it sees the
// window (or the use) and stays.
func (ln *listener) beginDraw() drawWindow {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if ln.c.cfg.DisableListen || ln.c.closed.Load() || ln.closed {
		return drawWindow{}
	}
	return ln.hubLocked().beginDraw()
}

// endDraw closes w (see listenHub.endDraw); a window never opened reports
// nothing heard. Every window opened must be closed.
func (ln *listener) endDraw(w drawWindow, ns, key string) (heard, served, turn bool) {
	if w.h == nil {
		return false, false, false
	}
	return w.h.endDraw(w, ns, key)
}

// gen returns the generation of the hub's connection (listenHub.gen; 0
// without a hub): it changes whenever the hub listens on a new connection,
// as it must after a restart of the server.
func (ln *listener) gen() uint64 {
	ln.mu.Lock()
	h := ln.hub
	ln.mu.Unlock()
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// listening reports whether release notifications can currently arrive.
func (ln *listener) listening() bool {
	ln.mu.Lock()
	h := ln.hub
	ln.mu.Unlock()
	return h != nil && !ln.c.cfg.DisableListen && h.isHealthy()
}

// payload encodes a wake-up of kind for key of namespace ns as
// parsePayload decodes it (the SQL that notifies spells the same with
// octet_length); a test checks the round trip.
func payload(kind byte, ns, key string) string {
	return string([]byte{kind}) + strconv.Itoa(len(ns)) + ":" + ns + key
}

// parsePayload decodes "<kind><octet_length(namespace)>:<namespace><key>".
// A payload that starts with a digit has no kind: it is a lease release
// from an older client.
func parsePayload(p string) (waitKey, bool) {
	kind := notifyLease
	if p != "" && (p[0] < '0' || p[0] > '9') {
		kind, p = p[0], p[1:]
	}
	i := strings.IndexByte(p, ':')
	if i < 0 {
		return waitKey{}, false
	}
	n, err := strconv.Atoi(p[:i])
	rest := p[i+1:]
	if err != nil || n < 0 || n > len(rest) {
		return waitKey{}, false
	}
	return waitKey{kind: kind, ns: rest[:n], key: rest[n:]}, true
}

// close detaches the client from its hub (the hub's connection closes
// with its last client; close waits for it until ctx ends).
func (ln *listener) close(ctx context.Context) {
	ln.mu.Lock()
	h := ln.hub
	ln.hub, ln.closed = nil, true
	ln.mu.Unlock()
	if h != nil {
		h.leave(ctx, ln)
	}
}
