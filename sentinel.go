package sentinel

// This file: Config and its defaults and checks, Client (New, Close, Owner, Pool), the call options (Option, WithTTL, WithNamespace, WithWait, ...) and their resolution (resolve, only).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel/internal/names"
	"github.com/sentinel-coordination/sentinel/internal/rerunhook"
)

// Limits on identifiers. Keys and namespaces are stored as text columns and
// compared byte for byte.
const (
	MaxKeyLen       = 1024               // bytes
	MaxNamespaceLen = 128                // bytes
	MaxOwnerLen     = 256                // bytes
	maxSchemaLen    = names.MaxSchemaLen // PostgreSQL's identifier limit (NAMEDATALEN-1)
)

// MinTTL is the shortest lease TTL accepted anywhere (WithTTL,
// Config.DefaultTTL, RenewHandle). A lease is renewed every TTL/3 and
// trusted until TTL minus a safety margin after each renewal was sent; below
// 100 ms a renewal's own round trip on a busy machine eats that margin and
// the lease would be lost while healthy.
const MinTTL = 100 * time.Millisecond

// MaxTTL is the longest lease TTL (and hard TTL) accepted anywhere: a
// year. Intervals of centuries wrap around when read back as a
// time.Duration, and nothing a lease guards needs one; for work that
// long, hold a shorter lease and let the heartbeat renew it.
const MaxTTL = 365 * 24 * time.Hour

// DefaultOnceHardTTL is Config.OnceHardTTL's default: how long heartbeats
// may keep a Once execution alive. It bounds how long a process that hangs
// inside fn, while still heartbeating, keeps its key; the TTL, not the hard
// TTL, is what detects a crash. It is not a multiple of the TTL, because
// the TTL is chosen for the speed of failover and the work's duration does
// not scale with it.
const DefaultOnceHardTTL = 10 * time.Minute

// Config configures a Client. The zero value is valid: every field documents
// its default, which New fills in before validating the result.
type Config struct {
	// Schema is the PostgreSQL schema holding Sentinel's tables. It is
	// always quoted, so any name of up to 63 bytes works. Default "sentinel".
	Schema string

	// Namespace isolates keys of different systems sharing a database. It is
	// stored in its own column, never as a key prefix. A call can override
	// it with WithNamespace. Default "default".
	Namespace string

	// DefaultTTL is the lease time-to-live used when a call gives no
	// WithTTL. Heartbeats extend a lease by this much at a time. Default 3s.
	DefaultTTL time.Duration

	// OnceHardTTL is the default hard TTL of a Once (and OnceTx)
	// execution: heartbeats keep fn's lease alive for at most this long,
	// however healthy. Default DefaultOnceHardTTL (10 minutes): a healthy
	// process finishing a multi-second or multi-minute call is not left
	// uncertain. The trade-off: a process that hangs inside fn while its
	// heartbeat goes on keeps the key for up to this long before it
	// becomes uncertain (Once) or claimable again (OnceTx), so set it to
	// the longest your side effects may take (for a card charge, say 30s).
	// WithHardTTL overrides it per call. A value below a call's TTL counts
	// as that TTL: MinTTL restores the original rule, under which the hard
	// TTL equals the TTL and heartbeats cannot extend an execution at all.
	OnceHardTTL time.Duration

	// HeartbeatInterval is the longest time between two renewals of a
	// lease. Each lease is renewed every min(HeartbeatInterval, TTL/3).
	// Must be at most DefaultTTL/2. Default DefaultTTL/3.
	HeartbeatInterval time.Duration

	// SafetyMargin is subtracted from every local lease deadline: a holder
	// stops trusting its lease at (send time of the last successful
	// renewal + TTL - SafetyMargin), on Go's monotonic clock. It absorbs
	// clock-rate differences and scheduling delay. Zero means TTL/10 of each
	// lease. Must be below DefaultTTL/3.
	SafetyMargin time.Duration

	// Owner identifies this client in lease and execution rows. Keep it
	// unique among concurrently running clients. Default
	// "<hostname>-<pid>-<random uuid>".
	//
	// Two clients with the same Owner (a fixed name reused by a restarted
	// process, or a mistake) are still kept apart: every renewal, release
	// and completion is guarded by the grant's own token as well as the
	// Owner, so neither can extend, free or complete the other's grant;
	// HeldError.Self and an elector's view of who leads are decided by
	// token and term, not by Owner; and an elector does not take over the
	// member row of a live elector with its Owner (it waits for that row
	// to expire, logging why). What stays ambiguous is the reports: Holder,
	// Leader, Members and the operator tools name the Owner, so two holders
	// with one Owner cannot be told apart there, except by Host and PID.
	Owner string

	// Host and PID are recorded with every grant so operators can find a
	// holder. Default os.Hostname() and os.Getpid(). Host must be UTF-8
	// without NUL, and PID must fit in 32 bits.
	Host string
	PID  int

	// Logger receives diagnostics (renewal failures, lost leases, listener
	// reconnects). Default: discard.
	Logger *slog.Logger

	// DisableListen turns off LISTEN/NOTIFY wake-ups for waiting acquirers;
	// they then re-check every WaitRecheck and at the holder's expiry. Set it
	// behind PgBouncer in transaction pooling mode. Default false.
	DisableListen bool

	// WaitRecheck bounds how long a waiting acquirer sleeps between two
	// attempts when no notification can arrive (listener down or disabled).
	// With a healthy listener a waiter sleeps until a release notification
	// or the holder's expiry. The listener checks its own connection: after
	// 2s without a notification it sends its LISTEN again, and a
	// connection that does not answer within 3s (a partition, a server gone
	// without closing it) is replaced, its waiters woken to re-check.
	// Default 1s.
	WaitRecheck time.Duration

	// ListenIdleTimeout is how long the process's LISTEN connection stays
	// open while nothing in the process waits (no Lease or Once WithWait
	// waiting, no Turn in line, no follower or elector running). PostgreSQL signals every listening
	// backend of the database on every NOTIFY, and the connection pings
	// its server every 2s while quiet, so a process that waited once
	// would otherwise cost the server something on every other process's
	// handover for as long as it runs. The next wait opens it again (one
	// connection set-up before that wait's first statement). Clients of a
	// process that share a pool and a schema share the connection: it
	// closes after the longest of their timeouts. Default 1 minute.
	// Negative: open until the last client closes.
	ListenIdleTimeout time.Duration

	// ReleaseTimeout bounds a Release whose context was already cancelled,
	// the releases done by Close, the release after Do's fn, and what
	// follows fn in Once, OnceTx and OnceSQLTx (the completion or commit,
	// a rollback, the claim's release), counted from when fn returns.
	// Default 5s; at least MinTTL: a completion cut off leaves its key
	// uncertain.
	ReleaseTimeout time.Duration

	// MaxResultSize is the largest encoded Once result stored, in bytes.
	// A larger result is treated like an encoding failure. Default 16 MiB.
	MaxResultSize int

	// RecordRejections writes a history event for every Once call that was
	// rejected (in progress, uncertain, reconciling) or replayed from cache.
	// Default false: such calls write nothing.
	RecordRejections bool

	// Observer receives metrics and tracing hooks (see package otelsentinel).
	// Default nil: no observer, and no cost on the hot paths.
	Observer *Observer

	// CoalesceInFlight is how many statements of one kind (Once claims,
	// replays included, and completions; lease grants and releases) a client has in
	// flight before concurrent callers may queue and share the next round
	// trip and commit. A caller queues only while that many statements of
	// its kind are in flight and the client serves more such calls than
	// its pool has connections: it would wait for a connection anyway. A
	// lone caller, or one of no more callers than connections, never
	// waits. A queue goes out as one
	// statement over arrays per kind, up to 32 calls per round trip (see
	// docs/benchmarks-history.md, "Many callers on a durable server").
	// Default 1. Negative: no coalescing, every statement on its own.
	CoalesceInFlight int
}

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Schema == "" {
		c.Schema = "sentinel"
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.DefaultTTL == 0 {
		c.DefaultTTL = 3 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.DefaultTTL / 3
	}
	if c.OnceHardTTL == 0 {
		c.OnceHardTTL = DefaultOnceHardTTL
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
		c.Host = storableText(c.Host)
	}
	if c.PID == 0 {
		c.PID = os.Getpid()
	}
	if c.Owner == "" {
		c.Owner = fmt.Sprintf("%s-%d-%s", c.Host, c.PID, uuid.NewString())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.WaitRecheck == 0 {
		c.WaitRecheck = time.Second
	}
	if c.ListenIdleTimeout == 0 {
		c.ListenIdleTimeout = time.Minute
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = 5 * time.Second
	}
	if c.MaxResultSize == 0 {
		c.MaxResultSize = 16 << 20
	}
	if c.CoalesceInFlight == 0 {
		c.CoalesceInFlight = 1
	}
	return c
}

func (c Config) validate() error {
	if why := names.Schema(c.Schema); why != "" {
		return invalid("Schema", "%s", why)
	}
	if err := checkNamespace(c.Namespace); err != nil {
		return err
	}
	if err := checkName("Owner", c.Owner, MaxOwnerLen); err != nil {
		return err
	}
	if err := checkText("Host", c.Host); err != nil {
		return err
	}
	if c.PID < math.MinInt32 || c.PID > math.MaxInt32 {
		return invalid("PID", "must fit a 32-bit integer (the column that records it), got %d", c.PID)
	}
	if c.DefaultTTL < MinTTL || c.DefaultTTL > MaxTTL {
		return invalid("DefaultTTL", "must be from MinTTL (%s) to MaxTTL (%s), got %s", MinTTL, MaxTTL, c.DefaultTTL)
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval > c.DefaultTTL/2 {
		return invalid("HeartbeatInterval", "must be positive and at most DefaultTTL/2 (%s), got %s", c.DefaultTTL/2, c.HeartbeatInterval)
	}
	if c.SafetyMargin < 0 || c.SafetyMargin >= c.DefaultTTL/3 {
		return invalid("SafetyMargin", "must be >= 0 and below DefaultTTL/3 (%s), got %s", c.DefaultTTL/3, c.SafetyMargin)
	}
	if c.OnceHardTTL < 0 || c.OnceHardTTL > MaxTTL {
		return invalid("OnceHardTTL", "must be from 0 to MaxTTL (%s), got %s", MaxTTL, c.OnceHardTTL)
	}
	if c.WaitRecheck <= 0 {
		return invalid("WaitRecheck", "must be positive, got %s", c.WaitRecheck)
	}
	if c.ReleaseTimeout < MinTTL {
		return invalid("ReleaseTimeout", "must be at least MinTTL (%s), got %s: it bounds the completion after fn, and a completion cut off leaves its key uncertain", MinTTL, c.ReleaseTimeout)
	}
	if c.MaxResultSize <= 0 || c.MaxResultSize > 1<<30-1 {
		return invalid("MaxResultSize", "must be in 1..1GiB-1, got %d", c.MaxResultSize)
	}
	return nil
}

// checkName refuses a name of more than maxLen bytes, empty, not UTF-8 or
// with NUL bytes (internal/names: cmd/sentinel checks its command line
// with the same rules before it connects).
func checkName(field, s string, maxLen int) error {
	if why := names.Name(s, maxLen); why != "" {
		return invalid(field, "%s", why)
	}
	return nil
}

// checkText refuses text a text column cannot store: invalid UTF-8 or
// NUL.
func checkText(field, s string) error {
	if s != storableText(s) {
		return invalid(field, "must be UTF-8 without NUL bytes, got %q", s)
	}
	return nil
}

func checkKey(key string) error { return checkName("key", key, MaxKeyLen) }

func checkNamespace(ns string) error {
	if why := names.Namespace(ns, MaxNamespaceLen); why != "" {
		return invalid("namespace", "%s", why)
	}
	return nil
}

// Client coordinates leases and executions for one owner. It is safe for
// concurrent use. Create it with New and stop it with Close.
type Client struct {
	pool *pgxpool.Pool
	cfg  Config
	sql  *queries
	exe  *execSQL
	rt   *resultTypeSQL

	hb *heartbeater
	co *coalescer // concurrent state changes share round trips (coalesce.go)
	// done: the Once keys this client saw completed (replayhint.go).
	done replayHints
	wk   waker // wake-ups sent after handovers commit (wake.go)
	// dropWakes makes the client send no wake-up after a handover, as a
	// process killed between the commit and the wake-up would (tests only).
	dropWakes atomic.Bool
	ln        *listener
	closed    atomic.Bool
	once      sync.Once
	// waits counts the lease waits (WithWait) under way: Close wakes
	// them and lets them withdraw their registrations (lease_wait.go).
	waits waitCount
	// closeCtx, set by Close before it ends what the client holds, bounds
	// the give-backs Close makes (closeGiveBack): one ReleaseTimeout for
	// all of them, however many wait for a connection.
	closeCtx atomic.Pointer[context.Context]
}

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
// it waited for), and waits for them, for at most ReleaseTimeout: they must withdraw
// before the caller closes the pool. No wait begins once closed is set.
func (c *Client) endWaits() {
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
	t := time.NewTimer(c.cfg.ReleaseTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// New returns a Client using pool. cfg may be nil for all defaults. New does
// not touch the database; call Migrate once to create the schema.
func New(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, invalid("pool", "must not be nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	cl := &Client{pool: pool, cfg: c, sql: newQueries(c.Schema)}
	cl.exe = newExecSQL(cl.sql.schema)
	cl.rt = newResultTypeSQL(cl.sql.schema)
	cl.hb = newHeartbeater(cl)
	cl.co = newCoalescer(pool, cl.cfg.CoalesceInFlight)
	cl.co.setStatements(coClaim, cl.exe.claimSet, cl.exe.claim)
	cl.co.setStatements(coFinish, cl.exe.finishSet, cl.exe.finish)
	cl.co.setStatements(coRead, cl.exe.readSet, cl.exe.read)
	cl.co.setStatements(coAcquire, cl.sql.acquireN, cl.sql.acquire)
	cl.co.setStatements(coRelease, cl.sql.releaseS, cl.sql.release)
	cl.ln = newListener(cl)
	return cl, nil
}

// Config returns the client's effective configuration (defaults filled in).
func (c *Client) Config() Config { return c.cfg }

// Owner returns the owner identity this client writes into rows it holds.
func (c *Client) Owner() string { return c.cfg.Owner }

// Pool returns the pool the client uses.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Close stops heartbeats, releases every lease the client still holds (not
// one handed on with Lease.Detach, which its receiver holds; an
// execution lease held by a running Once ends, cancelling fn's context,
// and so does the lease of a running Do, whose error then matches
// ErrLeaseLost and ErrClosed),
// ends the waits under way, of Lease and of Once with WithWait (they
// withdraw, or count out of the claim they waited for, and return
// ErrClosed; Close waits for them for at most ReleaseTimeout) and closes the listener
// connection. Its releases and give-backs (of leases, and of turns'
// tickets) run together, within one ReleaseTimeout in all; one not done
// by then expires within its TTL. Each is retried after a transient
// error (a dropped connection, a restarting server), within that time,
// but not while the database cannot be reached at all: Close does not
// wait out an outage. A lease or turn Close gave back reads
// as released (Err returns ErrReleased); one it could not give back as
// a failed release (matching ErrClosed, reported to
// Observer.ReleaseFailed); one whose row was gone before Close (taken
// over or expired) as lost. A lease whose release committed but whose
// reply was lost, so that the retry found its row freed already, reads as
// released when that first attempt was sent before the lease's local
// deadline (nobody could be granted the key by expiry before it arrived);
// a takeover with WithForce while it was in flight then reads as
// released too. A turn's ticket found gone by a retry reads as released
// when the ticket's record in the queue's history says the failed attempt
// gave it up while it was live. An elector's term is not released by Close
// but by its Run, once OnElected returned (Run then returns ErrClosed,
// joined with the release's error if it failed): wait for Run to return
// before closing the pool. It does not close the pool. Close is
// idempotent; later calls on the client return ErrClosed.
func (c *Client) Close() {
	c.once.Do(func() {
		c.closed.Store(true)
		held := c.hb.stop()
		c.endWaits() // a grant they read now is given back (hb.add fails)
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ReleaseTimeout)
		defer cancel()
		c.closeCtx.Store(&ctx)
		var leases, others []*Lease
		for _, l := range held {
			if l.kind == kindLease {
				// Wait for a Release under way; release the rest below
				// while holding their release locks.
				l.relMu.Lock()
				defer l.relMu.Unlock()
				if l.ended() == nil {
					// End it before the release frees the key: its
					// holder's Done closes before anyone else can be
					// granted it (releaseAll reports one it did not
					// free as lost).
					l.mu.Lock()
					l.byClose = true
					l.mu.Unlock()
					l.end(ErrReleased)
					leases = append(leases, l)
				}
			} else {
				others = append(others, l)
			}
		}
		// The others end together: ending a turn gives its ticket back,
		// a statement bounded by ReleaseTimeout, and N of them one after
		// the other took N x ReleaseTimeout when the server was slow.
		// Bounded by the pool's size, as they would queue for it anyway,
		// and all by ctx (closeGiveBack): one ReleaseTimeout in all.
		ending := make(chan struct{})
		go func() {
			defer close(ending)
			var wg sync.WaitGroup
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
					l.end(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: "client closed", Cause: ErrClosed})
				}()
			}
			wg.Wait()
		}()
		c.releaseAll(ctx, leases)
		<-ending
		c.flushWakes() // the wake-ups of handovers made before Close
		c.ln.close()
	})
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
// Close (taken over, released or expired), a loss. The lease reads as
// released when an earlier attempt that included it was sent before its
// local deadline: Close had ended it (Done closed) before then, and
// nobody could be granted its key by expiry before that deadline's margin
// ran out, so whatever freed the row, the holder's work overlapped nobody's.
// The wake-up the lost reply would have sent is sent (a spare one when
// the key has no waiter). What this cannot tell from a release is a
// forced takeover (WithForce, an operator's) that came while the first
// attempt was in flight or before: an answered attempt reports it lost,
// one whose reply was lost reports the lease released. Otherwise (the
// lease was past its local deadline already when Close sent its first
// attempt) it reads as lost, as it would have without the retry.
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
			return prevErr
		}
		nss, keys, tokens := make([]string, len(batch)), make([]string, len(batch)), make([]int64, len(batch))
		for i, p := range batch {
			nss[i], keys[i], tokens[i] = p.l.ns, p.l.key, p.l.token
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
		for _, p := range batch {
			p.answered = true
			switch {
			case freed[[2]string{p.l.ns, p.l.key}]:
				p.released = true
			case p.sentLive: // freed by an earlier attempt, its reply lost
				p.released = true
				wakes = append(wakes, payload(notifyLease, p.l.ns, p.l.key))
			}
		}
		c.wake("", wakes...) // the schema's channel: a waiter of any process may take the key
		return nil
	}, "leases", len(leases))
	if err == nil {
		err = prevErr // the failure of the last attempt, for a lease past its expiry by then
	}
	failed := 0
	for _, p := range ps {
		l := p.l
		switch {
		case p.released:
		case p.answered:
			// The row was gone before Close: lost while held (taken
			// over or expired), not ended by Close, so its error says
			// so and does not match ErrClosed (an observer tells
			// Close's own ends by it).
			l.notReleased(&LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: "taken over, released or expired",
				Cause: &StaleTokenError{Namespace: l.ns, Key: l.key, Token: l.token}}, false)
		default: // not freed: no loss (Observer.ReleaseFailed)
			failed++
			lf := &LostError{Namespace: l.ns, Key: l.key, Token: l.token, Kind: l.lossKind(), Reason: "client closed", Cause: ErrClosed}
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

func (c *Client) checkOpen() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Option adjusts one call (Lease, Do, Once, OnceTx, Turn, the operator
// calls). Each function's documentation lists the options it takes; an
// option that does not apply to a call is rejected with ErrInvalid before
// anything is written.
type Option func(*callOptions)

type callOptions struct {
	ttl       time.Duration
	ttlSet    bool
	hardTTL   time.Duration
	hardSet   bool
	namespace string
	// namespaceSet: WithNamespace was given; allNamespaces: WithAllNamespaces.
	namespaceSet  bool
	allNamespaces bool
	wait          bool
	force         bool
	codec         Codec
	metadata      map[string]any
	token         int64
	// label: WithLabel (Turn only); labelSet: it was given.
	label    string
	labelSet bool
	// after: WithAfterEvent (FollowQueues only); afterSet: it was given.
	after    int64
	afterSet bool
	// rerun: WithRerun (Once only); rerunSet: it was given. rerunGuard:
	// package idempotency's, taken by start from the call's ctx
	// (internal/rerunhook).
	rerun      int
	rerunSet   bool
	rerunGuard rerunhook.Guard
	// limit: WithLimit (History only); limitSet: it was given.
	limit    int
	limitSet bool
}

// WithTTL sets the lease time-to-live of one call. Heartbeats extend the
// lease by this much at a time. Default Config.DefaultTTL.
// It must be from MinTTL to MaxTTL: zero, a negative value or one above
// MaxTTL is ErrInvalid.
func WithTTL(d time.Duration) Option { return func(o *callOptions) { o.ttl, o.ttlSet = d, true } }

// WithHardTTL caps the lifetime of a lease or execution however healthy its
// heartbeats are. For Once and OnceTx it defaults to Config.OnceHardTTL (10
// minutes unless set; never below the call's TTL); for Lease the default is
// no cap. It must be at least the call's TTL, and at most MaxTTL.
func WithHardTTL(d time.Duration) Option {
	return func(o *callOptions) { o.hardTTL, o.hardSet = d, true }
}

// WithNamespace overrides Config.Namespace for one call.
func WithNamespace(ns string) Option {
	return func(o *callOptions) { o.namespace, o.namespaceSet = ns, true }
}

// WithAllNamespaces makes an operator call that reads or deletes many
// records (Prune) act on every namespace instead of the client's. Nothing
// spans namespaces without it.
func WithAllNamespaces() Option { return func(o *callOptions) { o.allNamespaces = true } }

// WithWait makes Lease block until the lease is acquired or ctx ends. A
// waiter is woken by the holder's release (LISTEN/NOTIFY) and re-checks at
// the holder's expiry as computed by the database. Use a ctx deadline for a
// timeout. While the database is unreachable the waiter keeps waiting,
// trying again every Config.WaitRecheck; each of its statements is given
// at most the lease's TTL (at least 1 s), so one sent on a connection
// that silently lost its path is abandoned and retried over another.
//
// On Once and OnceTx, a caller that finds the key in progress elsewhere
// waits for its outcome (woken by the statement that ends it, re-checking
// at the holder's expiry) and returns the result, Cached; a key that is or
// becomes uncertain or reconciling returns at once, and a key given back
// (Retryable, expired claim) is run by the waiter. The waiter counts itself
// in on the claim it waits for (one statement; the outcome notifies only
// while someone is counted in), again on each new claim it goes on waiting
// for, and out when ctx ends first; a claim that takes the key over
// (after a hand-back, a re-run) starts the count again, so later outcomes
// of a key once waited for notify nobody (schema version 19).
func WithWait() Option { return func(o *callOptions) { o.wait = true } }

// WithForce makes Lease take the lease even when another owner holds it.
// It is for operators: the previous holder learns of the loss only at its
// next renewal, so two holders may overlap until then.
func WithForce() Option { return func(o *callOptions) { o.force = true } }

// WithCodec sets how Once encodes and decodes results. Default JSONCodec.
func WithCodec(c Codec) Option { return func(o *callOptions) { o.codec = c } }

// WithToken makes an operator's step (Reconcile, ForceComplete,
// ResetToClaimed, SetResult) act only while the key is at this fencing
// token: an operator passes the token it inspected, so a concurrent change
// is refused with ErrWrongState instead of being overwritten.
func WithToken(token int64) Option { return func(o *callOptions) { o.token = token } }

// WithMetadata attaches metadata (JSON-encodable) to the history events a
// Once call or reconciliation writes. Text jsonb cannot hold is stored with
// invalid UTF-8 as U+FFFD and NUL as the text \x00.
func WithMetadata(m map[string]any) Option { return func(o *callOptions) { o.metadata = m } }

func (c *Client) resolve(key string, opts []Option) (callOptions, error) {
	o, err := c.resolveQueue(key, opts)
	switch {
	case err != nil:
		return o, err
	case o.labelSet:
		return o, invalid("option", "WithLabel applies only to Turn and TurnAll")
	case o.afterSet:
		return o, invalid("option", "WithAfterEvent applies only to FollowQueues")
	}
	return o, nil
}

// resolveQueue is resolve for the queue's calls, WithLabel and
// WithAfterEvent included (see resolveTurn, which checks the one it takes
// and refuses the other).
func (c *Client) resolveQueue(key string, opts []Option) (callOptions, error) {
	o, err := c.resolveCall(key, opts)
	switch {
	case err != nil:
		return o, err
	case o.rerunSet:
		return o, invalid("option", "WithRerun applies only to Once")
	case o.limitSet:
		return o, invalid("option", "WithLimit applies only to History")
	}
	return o, nil
}

// resolveCall is resolve for every option, WithRerun and WithLimit
// included (see onceOptions and History, which check the one they take and
// refuse the other).
func (c *Client) resolveCall(key string, opts []Option) (callOptions, error) {
	o := callOptions{namespace: c.cfg.Namespace}
	if err := c.checkOpen(); err != nil {
		return o, err
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := checkKey(key); err != nil {
		return o, err
	}
	if o.allNamespaces {
		return o, invalid("option", "WithAllNamespaces applies only to Prune; a call on a key acts in one namespace")
	}
	if err := checkNamespace(o.namespace); err != nil {
		return o, err
	}
	if !o.ttlSet {
		o.ttl = c.cfg.DefaultTTL
	}
	if o.ttl < MinTTL || o.ttl > MaxTTL {
		return o, invalid("TTL", "must be from MinTTL (%s) to MaxTTL (%s), got %s", MinTTL, MaxTTL, o.ttl)
	}
	if o.hardSet && (o.hardTTL <= 0 || o.hardTTL > MaxTTL) {
		return o, invalid("hard TTL", "must be positive and at most MaxTTL (%s), got %s", MaxTTL, o.hardTTL)
	}
	if o.hardTTL != 0 && o.hardTTL < o.ttl {
		return o, invalid("hard TTL", "must be >= TTL (%s), got %s", o.ttl, o.hardTTL)
	}
	if o.token < 0 {
		return o, invalid("token", "must not be negative, got %d", o.token)
	}
	if m := c.margin(o.ttl); m >= o.ttl/3 {
		return o, invalid("TTL", "%s is too short for SafetyMargin %s: the TTL must exceed 3x the margin", o.ttl, m)
	}
	return o, nil
}

// What a call takes beside WithNamespace, for only. WithLabel,
// WithAfterEvent, WithRerun, WithLimit and WithAllNamespaces are refused
// by resolve already.
const (
	takesTTL = 1 << iota
	takesCodec
	takesMetadata
	takesToken
)

// only refuses, with ErrInvalid, the options given to call that it does
// not take (see Option): takes names the ones it does beside
// WithNamespace.
func (o callOptions) only(call string, takes int) error {
	var given []string
	for _, x := range []struct {
		name  string
		set   bool
		taken bool
	}{
		{"WithTTL", o.ttlSet, takes&takesTTL != 0},
		{"WithHardTTL", o.hardSet, false},
		{"WithWait", o.wait, false},
		{"WithForce", o.force, false},
		{"WithCodec", o.codec != nil, takes&takesCodec != 0},
		{"WithMetadata", o.metadata != nil, takes&takesMetadata != 0},
		{"WithToken", o.token != 0, takes&takesToken != 0},
	} {
		if x.set && !x.taken {
			given = append(given, x.name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	return invalid("option", "%s: not an option of %s", strings.Join(given, ", "), call)
}

// margin is the safety margin applied to a lease of the given TTL.
func (c *Client) margin(ttl time.Duration) time.Duration {
	if c.cfg.SafetyMargin > 0 {
		return c.cfg.SafetyMargin
	}
	return ttl / 10
}

// renewEvery is how often a lease of the given TTL is renewed.
func (c *Client) renewEvery(ttl time.Duration) time.Duration {
	return min(c.cfg.HeartbeatInterval, ttl/3)
}

// Querier is what a fencing check or a transactional Once needs: a pool, a
// connection and a transaction all fit.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// us converts a duration to whole microseconds, the unit every TTL is sent in.
func us(d time.Duration) int64 { return d.Microseconds() }
