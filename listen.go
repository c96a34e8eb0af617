package sentinel

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// listener holds one dedicated connection (outside the pool) that LISTENs
// for lease releases and wakes the matching waiters. A notification is only
// a hint to re-check: the grant is always decided by the acquire statement.
// It starts with the first waiter and reconnects with backoff; while it is
// down waiters fall back to re-checking every Config.WaitRecheck.
type listener struct {
	c *Client

	mu      sync.Mutex
	waiters map[waitKey][]chan struct{} // per key, oldest first
	healthy bool                        // LISTEN is active on a live connection
	ready   chan struct{}               // closed once the first LISTEN attempt finished
	cancel  context.CancelFunc
	done    chan struct{}
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
	notifyLease     byte = 'l' // a lease was released: wake one waiter
	notifyExecution byte = 'e' // a Once key finished: wake every waiter
	notifyTurn      byte = 't' // a queue moved: the key is the one ticket that should re-check
	notifyQueue     byte = 'q' // a queue event was recorded (key ""): wake every follower
	// notifyElection ('g', election.go): a leader resigned.
)

// broadcast reports whether a notification of kind wakes every waiter of
// its key (a result every waiter can use) rather than one (a grant only
// one waiter can win).
func broadcast(kind byte) bool { return kind == notifyExecution || kind == notifyQueue }

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
	if ln.c.cfg.DisableListen || ln.c.closed.Load() {
		ln.mu.Unlock()
		return ch, false
	}
	if ln.ready == nil {
		ln.ready = make(chan struct{})
		lctx, cancel := context.WithCancel(context.Background())
		ln.cancel, ln.done = cancel, make(chan struct{})
		go ln.run(lctx)
	}
	ready := ln.ready
	ln.mu.Unlock()
	select { // wait for the first LISTEN so the caller's attempt is covered
	case <-ready:
	case <-ctx.Done():
	}
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ch, ln.healthy
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
	select {
	case <-ch:
		if !broadcast(kind) {
			ln.wakeOneLocked(k)
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

func (ln *listener) wakeOneLocked(k waitKey) {
	for _, ch := range ln.waiters[k] {
		select {
		case ch <- struct{}{}:
			return
		default: // already awake; try the next
		}
	}
}

// wakeAll wakes every waiter so it re-checks (used when the connection
// drops: notifications may have been missed).
func (ln *listener) wakeAll() {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	for _, list := range ln.waiters {
		for _, ch := range list {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// listening reports whether release notifications can currently arrive.
func (ln *listener) listening() bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.healthy && !ln.c.cfg.DisableListen
}

func (ln *listener) setHealthy(h bool) {
	ln.mu.Lock()
	ln.healthy = h
	ln.mu.Unlock()
}

func (ln *listener) run(ctx context.Context) {
	defer close(ln.done)
	first := true
	defer func() {
		// Closed before the first attempt (Close raced the first
		// subscriber): release the subscribers waiting for it.
		if first {
			close(ln.ready)
		}
	}()
	backoff := 50 * time.Millisecond
	listen := ln.listenSQL()
	for ctx.Err() == nil {
		conn, err := ln.connect(ctx)
		if first {
			first = false
			close(ln.ready)
		}
		if err != nil {
			ln.c.cfg.Logger.Warn("sentinel: listener connect failed; waiters re-check periodically", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		ln.wakeAll() // releases may have happened while we were down
		for {
			n, err := waitNotification(ctx, conn, listen, listenIdle, listenPingTimeout)
			if err != nil {
				break
			}
			if k, ok := parsePayload(n.Payload); ok {
				ln.notify(k)
			}
		}
		ln.setHealthy(false)
		ln.wakeAll()
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}
}

func (ln *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, listenConnConfig(ln.c.pool)) // each host bounded (listenconn.go)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, listenPingTimeout)
	defer cancel()
	if _, err := conn.Exec(lctx, ln.listenSQL()); err != nil {
		_ = conn.Close(lctx)
		return nil, err
	}
	ln.setHealthy(true)
	return conn, nil
}

// listenSQL is the statement that listens on the client's channel (also the
// listener's ping: see listenconn.go).
func (ln *listener) listenSQL() string {
	return "LISTEN " + pgx.Identifier{ln.c.sql.channel}.Sanitize()
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

func (ln *listener) close() {
	ln.mu.Lock()
	cancel, done := ln.cancel, ln.done
	ln.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}
