package sentinel

// This file: The listen hub: one LISTEN connection per process, pool and schema, shared by every Client on them, dispatching each notification to the listener that waits for it.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// One LISTEN connection per process, pool and schema.
//
// PostgreSQL (up to 18 at least) signals every backend that LISTENs in the
// database when a transaction that called NOTIFY commits, whatever its
// channels, and each of them forwards every notification on its channel
// to its client. With a LISTEN connection per Client, a process running
// many clients on one pool (a client per worker, say) made every handover
// wake that many backends and that many client goroutines, for one waiter.
// So the clients of a process that share a pool and a schema (hence a
// channel) share one hub: one connection, one backend signalled, and the
// hub routes each payload to the one waiter it names:
//
//   - a turn's payload names a ticket: only the client that drew it has a
//     waiter for it;
//   - a lease release or a resignation wakes one waiter of the key in the
//     whole process (the clients are tried in turn, so none starves), not
//     one per client;
//   - an execution's completion or a queue event wakes every waiter.
//
// Across processes, a wake-up for one waiter (a lease's grant, a turn's,
// a term's) goes to the hub's own channel (direct), which the waiter
// recorded with its registration, ticket or successorship (migration 14):
// with N processes waiting in a schema, the others' backends are still
// signalled (PostgreSQL signals every listener of the database) but no
// longer send it to their clients. Bench, 8 lease handovers at once with
// 16 more processes waiting in the schema: p50 3.31-3.35 ms → 2.84-2.89
// ms, 1,094-1,101 → 905-942 µs of CPU per handover (docs/benchmarks-history.md,
// "Twelfth part"). Wake-ups every process may use (a release nobody was
// granted, an execution's outcome, a queue event, a group's followers) stay
// on the schema's channel.
//
// Clients on different pools never share (a pool may have its own dialer
// or server), so a client's waiters always hear from the server its pool
// talks to. The hub's connection is outside every pool, as the listener's
// always was; it starts with the first subscriber and closes with the last
// client that used it, or once nothing in the process has waited for a
// while (Config.ListenIdleTimeout; see watchIdle).
type listenHub struct {
	key    hubKey
	logger *slog.Logger
	// direct is the hub's own channel, heard by this process alone: a
	// waiter records it with its registration so that a release wakes
	// its process only, where the schema's channel (key.channel) wakes
	// every process waiting in the schema (migration 14). Random, so it
	// never names another process's hub, and kept across reconnections.
	direct string

	mu      sync.Mutex
	members []*listener
	next    int  // where the next wake-one starts, so clients take turns
	healthy bool // LISTEN is active on a live connection
	// kept holds grants' wake-ups (a lease's, a term's: keep, kept, claim)
	// with the grant they carry, until their waiter takes them: the waiter
	// takes its grant from there instead of reading it from the database,
	// and one that subscribes to its registration late (it learns the
	// registration's id from the statement that registers it, so a release
	// may grant it, and its wake-up arrive, in between) is woken by the
	// subscription.
	kept     map[waitKey]string
	keptFIFO []waitKey
	// gen counts the connections on which LISTEN became active: a draw
	// window (below) that sees it change may have missed notifications.
	gen uint64
	// drawing counts the draws in flight (listener.beginDraw): while one
	// is, turn wake-ups ('s', 't') are kept in turnKept, for a ticket
	// whose waiter subscribes only once its draw returned the number (a
	// leave may grant or wake it in between). turnSeq numbers them;
	// turnEvicted is the highest number dropped to bound the map. All
	// are forgotten when no draw is in flight.
	drawing     int
	turnKept    map[waitKey]uint64
	turnFIFO    []waitKey
	turnSeq     uint64
	turnEvicted uint64
	// lastUse is when a member last began or ended a wait or a draw
	// (use, beginDraw, endDraw, joinHub), uses counts those: an idle hub retires (see retireIdle)
	// only if neither moved while it looked at its members. retired is
	// set once it has: it is out of hubs, its connection closes, and a
	// member that waits again joins a new hub.
	lastUse time.Time
	uses    uint64
	retired bool
	ready   chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

type hubKey struct {
	pool    *pgxpool.Pool
	channel string
}

var (
	hubsMu sync.Mutex
	hubs   = map[hubKey]*listenHub{}
)

// joinHub adds ln to the hub of its pool and channel, starting one if none
// runs.
func joinHub(ln *listener) *listenHub {
	k := hubKey{pool: ln.c.pool, channel: ln.c.sql.channel}
	hubsMu.Lock()
	defer hubsMu.Unlock()
	h := hubs[k]
	if h == nil {
		ctx, cancel := context.WithCancel(context.Background())
		h = &listenHub{key: k, logger: ln.c.cfg.Logger, direct: directChannel(), lastUse: time.Now(), ready: make(chan struct{}),
			cancel: cancel, done: make(chan struct{})}
		hubs[k] = h
		go h.run(ctx)
		go h.watchIdle(ctx)
	}
	h.mu.Lock()
	h.members = append(h.members, ln)
	h.lastUse = time.Now()
	h.uses++
	h.mu.Unlock()
	return h
}

// use records that a member begins a wait or a draw on h, and reports
// whether h can serve it (false: h retired; the member joins a new hub).
func (h *listenHub) use() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.retired {
		return false
	}
	h.lastUse = time.Now()
	h.uses++
	return true
}

// removeMember drops ln from a retired hub's members (ln moves to a new
// hub).
func (h *listenHub) removeMember(ln *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.Index(h.members, ln); i >= 0 {
		h.members = slices.Delete(h.members, i, i+1)
	}
}

// An idle process stops listening.
//
// PostgreSQL (up to 18 at least) signals every backend of the database
// that LISTENs on any channel when a transaction that called NOTIFY
// commits, and each signalled backend reads the notification queue: a
// process with a hub costs the server that on every handover, outcome
// and queue event of every other process, whether or not it waits for
// anything, and its hub pings every listenIdle. So a hub none of whose
// members has waited or drawn for the longest of their
// Config.ListenIdleTimeout closes its connection and leaves the process's
// hubs; the next wait or draw starts a new one (a new direct channel: the
// registrations that recorded the old one are gone with their waiters).
//
// Nothing can be waiting on a hub when it retires: a wait subscribes (and
// a draw opens its window) through use, which a retired hub refuses; the
// hub retires only after finding every member without a waiter, no draw
// open, and no use since it began to look (uses unchanged), and it
// decides under hubsMu and its own lock, the locks joinHub and use take.
// A registration whose waiter has gone (it gave up) may still name the
// old channel: its grant, unheard, expires within its TTL, as a grant to
// a waiter that died does.

// watchIdle retires h once it has been idle for its members' timeout.
func (h *listenHub) watchIdle(ctx context.Context) {
	for {
		timeout := h.idleTimeout()
		every := time.Second
		if timeout > 0 {
			every = min(max(timeout/4, time.Millisecond), 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		if timeout > 0 && h.retireIdle(timeout) {
			h.logger.Debug("sentinel: listener idle; connection closed until the next wait", "channel", h.key.channel,
				"idle", timeout)
			return
		}
	}
}

// idleTimeout is the longest Config.ListenIdleTimeout of h's members;
// 0 (never) when one of them is negative or h has none.
func (h *listenHub) idleTimeout() time.Duration {
	var d time.Duration
	for _, ln := range h.snapshot() {
		t := ln.c.cfg.ListenIdleTimeout
		if t < 0 {
			return 0
		}
		d = max(d, t)
	}
	return d
}

// retireIdle retires h if nothing used it for timeout and no member
// waits: it leaves hubs and its connection closes.
func (h *listenHub) retireIdle(timeout time.Duration) bool {
	h.mu.Lock()
	if h.retired || h.drawing > 0 || time.Since(h.lastUse) < timeout {
		h.mu.Unlock()
		return false
	}
	uses := h.uses
	members := slices.Clone(h.members)
	h.mu.Unlock()
	for _, ln := range members {
		if ln.waiting() {
			return false
		}
	}
	hubsMu.Lock()
	h.mu.Lock()
	ok := !h.retired && h.uses == uses && h.drawing == 0
	if ok {
		h.retired, h.healthy = true, false
		h.kept, h.keptFIFO = nil, nil
		if hubs[h.key] == h {
			delete(hubs, h.key)
		}
	}
	h.mu.Unlock()
	hubsMu.Unlock()
	if ok {
		h.cancel()
	}
	return ok
}

// leave removes ln; the last member stops the hub and waits for its
// connection to close, until ctx ends (Close's deadline): after it, the
// connection closes in the background, within a second (run).
func (h *listenHub) leave(ctx context.Context, ln *listener) {
	hubsMu.Lock()
	h.mu.Lock()
	if i := slices.Index(h.members, ln); i >= 0 {
		h.members = slices.Delete(h.members, i, i+1)
	}
	empty := len(h.members) == 0
	h.mu.Unlock()
	if empty && hubs[h.key] == h {
		delete(hubs, h.key)
	}
	hubsMu.Unlock()
	if empty {
		h.cancel()
		select {
		case <-h.done:
		case <-ctx.Done():
		}
	}
}

func (h *listenHub) isHealthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.healthy
}

func (h *listenHub) setHealthy(v bool) {
	h.mu.Lock()
	h.healthy = v
	h.mu.Unlock()
}

// snapshot returns the members, starting with the one whose turn it is.
func (h *listenHub) snapshot() []*listener {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.members)
	out := make([]*listener, 0, n)
	for i := range n {
		out = append(out, h.members[(h.next+i)%n])
	}
	return out
}

// dispatch routes one notification; data is what a grant's wake-up
// carries (see sqlRelease, sqlResignWake), "" for the other kinds.
func (h *listenHub) dispatch(k waitKey, data string) {
	if broadcast(k.kind) {
		for _, ln := range h.snapshot() {
			ln.notify(k)
		}
		return
	}
	if !carriesGrant(k.kind) {
		if k.kind == notifyTurnServed || k.kind == notifyTurn {
			// Kept first, offered second, as a grant is: a waiter
			// that subscribed after the offer found nobody finds it
			// kept when its draw window ends (listener.endDraw).
			h.keepTurn(k)
		}
		h.wakeOne(k, nil)
		return
	}
	// A grant names one registration (or member). Kept first, offered second: a
	// subscription made after the offer found nobody finds it kept
	// (listener.subscribeTo), one made before is woken by the offer, and
	// one made in between gets both (a spare wake-up). The woken waiter
	// takes the grant from here (claim).
	h.keep(k, data)
	h.wakeOne(k, nil)
}

// maxKept bounds the grant wake-ups a hub keeps for their waiters. One
// dropped from it (or never received) costs its waiter a read of its grant,
// or time: the waiter finds the grant at its registration's renewal.
const maxKept = 1024

// keep records a grant wake-up and its data for its waiter, dropping the
// oldest beyond maxKept.
func (h *listenHub) keep(k waitKey, data string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.kept == nil {
		h.kept = make(map[waitKey]string)
	}
	if _, ok := h.kept[k]; ok {
		return
	}
	h.kept[k] = data
	h.keptFIFO = append(h.keptFIFO, k)
	for len(h.kept) > maxKept {
		delete(h.kept, h.keptFIFO[0]) // a no-op for one claimed already
		h.keptFIFO = h.keptFIFO[1:]
	}
	if len(h.keptFIFO) > 2*maxKept { // mostly claimed: compact
		live := make([]waitKey, 0, len(h.kept))
		for _, x := range h.keptFIFO {
			if _, ok := h.kept[x]; ok {
				live = append(live, x)
			}
		}
		h.keptFIFO = live
	}
}

// maxTurnKept bounds the turn wake-ups kept while draws are in flight. A
// draw window that loses one of its own to the bound is not trusted
// (endDraw), and its waiter makes its serving check.
const maxTurnKept = 4096

// keepTurn keeps a turn wake-up while a draw is in flight.
func (h *listenHub) keepTurn(k waitKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.drawing == 0 {
		return
	}
	if _, ok := h.turnKept[k]; ok {
		return
	}
	if h.turnKept == nil {
		h.turnKept = make(map[waitKey]uint64)
	}
	h.turnSeq++
	h.turnKept[k] = h.turnSeq
	h.turnFIFO = append(h.turnFIFO, k)
	for len(h.turnFIFO) > maxTurnKept {
		h.turnEvicted = h.turnKept[h.turnFIFO[0]]
		delete(h.turnKept, h.turnFIFO[0])
		h.turnFIFO = h.turnFIFO[1:]
	}
}

// drawWindow spans a draw, from before its statement is sent until its
// waiter subscribed to its ticket (listener.beginDraw, endDraw).
type drawWindow struct {
	h   *listenHub // nil: no window (no hub, or not listening)
	gen uint64
	seq uint64
}

// beginDraw opens a draw window: from now on, turn wake-ups are kept. A
// window opened while the hub does not listen is never heard (endDraw:
// LISTEN becoming active changes gen), but it keeps the hub from retiring
// until the draw's waiter has subscribed.
func (h *listenHub) beginDraw() drawWindow {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastUse = time.Now()
	h.uses++
	h.drawing++
	return drawWindow{h: h, gen: h.gen, seq: h.turnSeq}
}

// endDraw closes w. heard reports whether every notification sent on the
// channel since w opened reached the hub or is still on its way to it
// (the same connection listened throughout, and none kept was dropped);
// served and turn whether an 's' or a 't' wake-up for ticket key of
// namespace ns was kept meanwhile.
func (h *listenHub) endDraw(w drawWindow, ns, key string) (heard, served, turn bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	heard = h.healthy && h.gen == w.gen && h.turnEvicted <= w.seq
	_, served = h.turnKept[waitKey{notifyTurnServed, ns, key}]
	_, turn = h.turnKept[waitKey{notifyTurn, ns, key}]
	h.drawing--
	h.lastUse = time.Now()
	h.uses++
	if h.drawing == 0 {
		h.turnKept, h.turnFIFO = nil, nil
	}
	return heard, served, turn
}

// isKept reports whether a grant wake-up for k is kept.
func (h *listenHub) isKept(k waitKey) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.kept[k]
	return ok
}

// claim returns the data of the grant wake-up kept for k, if any, and
// forgets it.
func (h *listenHub) claim(k waitKey) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	data, ok := h.kept[k]
	if ok {
		delete(h.kept, k)
	}
	return data, ok
}

// wakeOne wakes one waiter for k in the process, trying the clients in
// turn, skipping except (a waiter of except passing its wake-up on).
func (h *listenHub) wakeOne(k waitKey, except *listener) {
	for _, ln := range h.snapshot() {
		if ln == except {
			continue
		}
		if ln.wakeOne(k) {
			h.mu.Lock()
			if i := slices.Index(h.members, ln); i >= 0 {
				h.next = i + 1
			}
			h.mu.Unlock()
			return
		}
	}
}

// wakeAll wakes every waiter of every member (the connection changed:
// notifications may have been missed).
func (h *listenHub) wakeAll() {
	for _, ln := range h.snapshot() {
		ln.wakeAll()
	}
}

func (h *listenHub) run(ctx context.Context) {
	defer close(h.done)
	first := true
	defer func() {
		// Stopped before the first attempt (the last client closed as
		// the first subscriber came): release the subscribers waiting.
		if first {
			close(h.ready)
		}
	}()
	backoff := 50 * time.Millisecond
	listen := h.listenSQL()
	attempted := false // a connection was attempted before this one
	for ctx.Err() == nil {
		conn, err := h.connect(ctx)
		if first {
			first = false
			close(h.ready)
		}
		if err != nil {
			attempted = true
			h.logger.Warn("sentinel: listener connect failed; waiters re-check periodically", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if attempted {
			// Releases may have happened while we were down, or before a
			// first attempt that failed. Not after the first attempt's
			// success: every subscriber waited for it (ready) before its
			// first read, so nothing was missed, and a wake-up would send
			// each of them back for a read it does not need.
			h.wakeAll()
		}
		attempted = true
		for {
			n, err := waitNotification(ctx, conn, listen, listenIdle, listenPingTimeout)
			if err != nil {
				break
			}
			if k, ok := parsePayload(n.Payload); ok {
				var data string
				if carriesGrant(k.kind) {
					// "<registration>/<grant>": route by the registration
					// (a term's: by the member token).
					if i := strings.IndexByte(k.key, '/'); i >= 0 {
						k.key, data = k.key[:i], k.key[i+1:]
					}
				}
				h.dispatch(k, data)
			}
		}
		h.setHealthy(false)
		h.wakeAll()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}
}

func (h *listenHub) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, listenConnConfig(h.key.pool)) // each host bounded (listenconn.go)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	defer cancel()
	if _, err := conn.Exec(lctx, h.listenSQL()); err != nil {
		_ = conn.Close(lctx)
		return nil, err
	}
	h.mu.Lock()
	h.healthy = true
	h.gen++
	h.mu.Unlock()
	return conn, nil
}

// listenSQL is the statement that listens on the hub's two channels, the
// schema's and its own, in one implicit transaction (pgx sends a statement
// without arguments by the simple protocol), so a connection listens on
// both or neither. It is also the listener's ping (listenconn.go).
func (h *listenHub) listenSQL() string {
	return "LISTEN " + pgx.Identifier{h.key.channel}.Sanitize() + "; LISTEN " + pgx.Identifier{h.direct}.Sanitize()
}

// directChannel returns a new hub's own channel: "sentinel_hub." and 16
// random hex digits (29 bytes, under PostgreSQL's 63), apart from every
// schema's channel ("sentinel_release.", channelName).
func directChannel() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "sentinel_hub." + hex.EncodeToString(b[:])
}
