package sentinel

// This file: Config and its defaults and checks, Client (New, Owner, Pool; Close is in close.go), the call options (Option, WithTTL, WithNamespace, WithWait, ...) and their resolution (resolve, only).

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
	// all of Client.Close (its waits' end, releases, give-backs and
	// listener close share one ReleaseTimeout, an outage included: size a
	// termination grace period by it), the release after Do's fn, and what
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
	// cut counts the give-backs of draws that ended unheard under way
	// (giveBackDraw): Close waits for them, or cancels them.
	cut cutOffs
	// terms counts the Electors' terms under way, from their grant to
	// their release by Run; Close waits for them (underway.go).
	terms underWay
	// testAfterStop, set by tests only (before Close), runs in Close once
	// the heartbeater stopped, before Close ends the leases it held: a
	// Release started there races Close as a deferred one can.
	testAfterStop func()
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

// Option adjusts one call (Lease, Do, Once, OnceTx, Turn, the operator
// calls). Each function's documentation lists the options it takes; an
// option that does not apply to a call is rejected with ErrInvalid before
// anything is written, and before any option's value is checked: the error
// names the option and the call (InvalidError.Field "option"), whatever
// value was given.
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

// refusal is a call's refusal of the options it does not take (nil: it
// takes every option its resolve function lets through). resolveCall runs
// it once the options are applied and before it checks any option's value:
// an option a call does not take is refused as such, whatever its value
// (Queue with WithTTL(0) said the TTL was out of bounds, not that Queue
// takes no TTL).
type refusal func(o callOptions) error

// onlyTakes is the refusal of a call that takes, beside WithNamespace, the
// options named by takes (see only).
func onlyTakes(call string, takes int) refusal {
	return func(o callOptions) error { return o.only(call, takes) }
}

func (c *Client) resolve(key string, opts []Option, refuse refusal) (callOptions, error) {
	return c.resolveQueue(key, opts, func(o callOptions) error {
		switch {
		case o.labelSet:
			return invalid("option", "WithLabel applies only to Turn and TurnAll")
		case o.afterSet:
			return invalid("option", "WithAfterEvent applies only to FollowQueues")
		case refuse != nil:
			return refuse(o)
		}
		return nil
	})
}

// resolveQueue is resolve for the queue's calls, WithLabel and
// WithAfterEvent included (see resolveTurn, which checks the one it takes
// and refuses the other).
func (c *Client) resolveQueue(key string, opts []Option, refuse refusal) (callOptions, error) {
	return c.resolveCall(key, opts, func(o callOptions) error {
		switch {
		case o.rerunSet:
			return invalid("option", "WithRerun applies only to Once")
		case o.limitSet:
			return invalid("option", "WithLimit applies only to History")
		case refuse != nil:
			return refuse(o)
		}
		return nil
	})
}

// resolveCall is resolve for every option, WithRerun and WithLimit
// included (see onceOptions and History, which check the one they take and
// refuse the other). refuse, the call's refusal of the options it does not
// take, runs before any option's value is checked.
func (c *Client) resolveCall(key string, opts []Option, refuse refusal) (callOptions, error) {
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
	if refuse != nil {
		if err := refuse(o); err != nil {
			return o, err
		}
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
// by resolve already; takesLabel and takesAfter are for resolveTurn, which
// refuses them for the queue's calls that do not take them (only ignores
// them).
const (
	takesTTL = 1 << iota
	takesCodec
	takesMetadata
	takesToken
	takesLabel
	takesAfter
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
