package sentinel

// Leader election.
//
// Leadership of a group is a lease on the group's row in the leaders table
// (a table of its own: no group name can collide with a lease key), and
// the term is that grant's fencing token, minted by the statement that
// writes the grant. Every transition is one guarded statement:
//
//	            campaign wins: the row is absent or expired by the database
//	            clock (one statement: lock it SKIP LOCKED, mint term T, write)
//	┌──────────┐ ─────────────────────────────────────────────▶ ┌─────────────┐ ──┐ heartbeat renews
//	│ follower │                                                 │ leader (T)  │   │ (owner + T +
//	└──────────┘ ◀───────────────────────────────────────────── └─────────────┘ ◀─┘ unexpired guard)
//	   │    ▲     OnElected's ctx is cancelled; once OnElected returned:
//	   │    │     release (owner + T guard, NOTIFY) on Resign, Run's ctx
//	   │    │     or a panic; on a loss (local deadline passed) the row
//	   └────┘     expires by itself, after the deadline
//	   sleeps until the leader's release (NOTIFY, a hint) or its expiry as
//	   the database computed it, then campaigns: no fixed poll interval
//
// A crash, with TTL t and margin m (t/10 by default): the leader's last
// renewal was sent at R; it would have stopped at R+t-m (its local
// deadline); the row expires at R'+t on the database clock (R' >= R, the
// renewal's statement time); a follower sleeping until that expiry wins the
// next campaign, term T+1, within t of the crash.
//
// What is not guaranteed: a leader paused longer than its margin (GC, a
// SIGSTOP, a VM freeze) may still act after its row expired; only writes
// guarded with VerifyTerm refuse it. The local deadline assumes the client's
// and the server's clocks run at the same rate (not that they agree).
// OnElected must return promptly once its ctx ends: while it runs the
// elector keeps renewing, and a graceful handover waits for it. A leader
// frozen inside a VerifyTerm transaction holds off the next election until
// the server ends that transaction (VerifyTerm bounds its idle time to the
// TTL). Members and Status are reports, refreshed once per renewal
// interval; who leads is only ever read from the leaders row.

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kinds of rows the heartbeat renews for elections (see renewKinds in
// queries.go).
// The integrator may renumber them; they only need to differ from the
// other kinds.
const (
	kindLeader leaseKind = 8 // a row in leaders: the leadership lease of a term
	kindMember leaseKind = 9 // a row in members: one running elector
)

// sqlCampaign is one election cycle, in one statement: take the group's
// leadership if it is free (no row, or a row expired by the database clock),
// minting the term in the statement that writes the grant; otherwise report
// the current leader and the time left on its lease. It also records the
// member's poll. A term that a resignation granted to this very elector
// (term_member is its member token, see sqlResign) is reported as acquired
// by the read: the successor only reads its grant, and its time left is
// measured at the read, on the database clock, after the grant was made.
//
// A campaign that writes no grant (it reads the leader, or a grant made by
// a resignation) commits without waiting for its WAL flush (sc:
// synchronous_commit off for this transaction only; a grant keeps the
// session's setting): its only write is the member's last_poll, which
// nobody relies on, and a grant it reads was made durable by the
// resignation's own commit before anyone could see it.
//
// Locks: a takeover locks the row FOR UPDATE (SKIP LOCKED: a locked row is
// reported held, never waited for), which conflicts with VerifyTerm's FOR
// KEY SHARE, so no new term begins while a guarded transaction of the old
// one is open. The leader's renewals (FOR NO KEY UPDATE) do not conflict
// with it, so a leader whose workers keep guarded transactions open back to
// back still renews its term. A first row inserted concurrently by another
// campaign is left to it (DO NOTHING): takeovers only go through the lock.
//
// $1 namespace, $2 election, $3 owner, $4 host, $5 pid, $6 app version,
// $7 ttl µs, $8 may take the leadership, $9 member token.
const sqlCampaign = `
WITH lk AS (
    SELECT t.namespace, t.election FROM {{schema}}.leaders t
    WHERE $8::bool AND t.namespace = $1 AND t.election = $2 AND t.expires_at <= pg_catalog.clock_timestamp()
    FOR UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leaders t SET
        owner = $3, term = pg_catalog.nextval({{seq}}), host = $4, pid = $5, app_version = $6,
        elected_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond',
        term_member = NULL
    FROM lk WHERE t.namespace = lk.namespace AND t.election = lk.election
    RETURNING t.owner, t.host, t.pid, t.app_version, t.term, t.elected_at, t.expires_at,
        t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
ins AS (
    INSERT INTO {{schema}}.leaders AS t
        (namespace, election, owner, term, host, pid, app_version, elected_at, renewed_at, expires_at)
    SELECT $1, $2, $3, pg_catalog.nextval({{seq}}), $4, $5, $6,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond'
    WHERE $8::bool AND NOT EXISTS (SELECT 1 FROM {{schema}}.leaders WHERE namespace = $1 AND election = $2)
    ON CONFLICT (namespace, election) DO NOTHING
    RETURNING t.owner, t.host, t.pid, t.app_version, t.term, t.elected_at, t.expires_at,
        t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
g AS (SELECT * FROM up UNION ALL SELECT * FROM ins),
sc AS (
    SELECT pg_catalog.set_config('synchronous_commit',
        CASE WHEN EXISTS (SELECT 1 FROM g) THEN pg_catalog.current_setting('synchronous_commit') ELSE 'off' END, true) AS v
),
mp AS (
    UPDATE {{schema}}.members m SET last_poll = pg_catalog.clock_timestamp()
    WHERE m.namespace = $1 AND m.election = $2 AND m.owner = $3 AND m.token = $9
      AND m.expires_at > pg_catalog.clock_timestamp()
    RETURNING 1
)
SELECT true, owner, host, pid, app_version, term, elected_at, expires_at, remaining, pg_catalog.clock_timestamp() FROM g, sc
UNION ALL
SELECT coalesce(t.term_member = $9::bigint AND t.owner = $3 AND t.expires_at > pg_catalog.clock_timestamp(), false),
    t.owner, t.host, t.pid, t.app_version, t.term, t.elected_at, t.expires_at,
    t.expires_at - pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp()
FROM {{schema}}.leaders t, sc
WHERE t.namespace = $1 AND t.election = $2 AND NOT EXISTS (SELECT 1 FROM g)`

// sqlResign ends a term, guarded by owner, term and expiry, and hands it
// over in the same statement when a successor is named (sqlElectionWait):
//
//   - lk locks the group's row FOR UPDATE, SKIP LOCKED, when the term is
//     live and a successor other than this elector ($7, its member token)
//     is registered (waiting_until) and its member row is live on the
//     database clock (a stopped elector deletes it; a dead one stops
//     renewing it). FOR UPDATE conflicts with VerifyTerm's FOR KEY SHARE,
//     as a campaign's takeover does: no new term begins while a guarded
//     transaction of the old one is open (the row is skipped then, and
//     the resignation only ends the term, as below).
//   - tr writes the next term for the successor: a term minted here, its
//     expiry counted from clock_timestamp() with the successor's TTL,
//     term_member naming it; the successor is notified by its member token
//     (kind 'h'), and reads its grant (sqlCampaign) when it wakes; the
//     group's other followers are woken too (kind 'g', after it), so they
//     see the new leader at once.
//   - otherwise d ends the term (expires it now) and wakes the group's
//     followers, only while one is registered as waiting: a transaction
//     that calls NOTIFY serializes its commit on a database-wide lock.
//
// A successor that died since it registered is granted a term it never
// learns of: the term expires within the successor's TTL (nobody renews
// it) and the other followers, asleep until its expiry, take over then.
// The member-row check makes that the rare case of a crash within one
// heartbeat period.
//
// RETURNING reads the row version this UPDATE wrote, made from the newest
// committed version (a concurrent sqlElectionWait is waited for and
// re-read, read committed's re-check), so a follower registered before the
// resignation commits is always seen: see Elector.Run for the whole
// argument.
// $1 namespace, $2 election, $3 owner, $4 term, $5 channel, $6 payload,
// $7 this elector's member token (0: none).
const sqlResign = `
WITH lk AS (
    SELECT t.namespace, t.election, t.next_owner, t.next_member, t.next_host, t.next_pid, t.next_app_version, t.next_ttl_us
    FROM {{schema}}.leaders t
    WHERE t.namespace = $1 AND t.election = $2 AND t.owner = $3 AND t.term = $4
      AND t.expires_at > pg_catalog.clock_timestamp()
      AND t.next_member IS NOT NULL AND t.next_member <> $7::bigint AND t.next_ttl_us > 0
      AND t.waiting_until > pg_catalog.clock_timestamp()
      AND EXISTS (SELECT 1 FROM {{schema}}.members m
          WHERE m.namespace = t.namespace AND m.election = t.election AND m.owner = t.next_owner
            AND m.token = t.next_member AND m.expires_at > pg_catalog.clock_timestamp())
    FOR UPDATE OF t SKIP LOCKED
),
tr AS (
    UPDATE {{schema}}.leaders t SET
        owner = lk.next_owner, term = pg_catalog.nextval({{seq}}), host = coalesce(lk.next_host, ''),
        pid = coalesce(lk.next_pid, 0), app_version = coalesce(lk.next_app_version, ''),
        elected_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + lk.next_ttl_us * interval '1 microsecond',
        term_member = lk.next_member,
        next_owner = NULL, next_member = NULL, next_host = NULL, next_pid = NULL, next_app_version = NULL, next_ttl_us = NULL
    FROM lk WHERE t.namespace = lk.namespace AND t.election = lk.election
    RETURNING pg_catalog.pg_notify($5, 'h' || pg_catalog.octet_length($1::text)::text || ':' || $1::text || lk.next_member::text)::text
        || pg_catalog.pg_notify($5, $6)::text
),
d AS (
    UPDATE {{schema}}.leaders t SET expires_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = $1 AND t.election = $2 AND t.owner = $3 AND t.term = $4
      AND t.expires_at > pg_catalog.clock_timestamp() AND NOT EXISTS (SELECT 1 FROM tr)
    RETURNING CASE WHEN t.waiting_until > pg_catalog.clock_timestamp() THEN pg_catalog.pg_notify($5, $6)::text END
)
SELECT (SELECT pg_catalog.count(*) FROM tr) + (SELECT pg_catalog.count(*) FROM d)`

// sqlElectionWait registers an elector that follows a live leader as
// waiting for the group's hand-off, until $3 µs after the term's expiry
// (waiting_until only ever moves forward), so that a resignation notifies
// (see sqlResign and Elector.Run). It never waits for a row another
// transaction has locked (a renewal, a resignation, a takeover under way;
// VerifyTerm's FOR KEY SHARE does not conflict): it then returns no row,
// like a group with no row, and the elector re-checks soon. It returns the
// term, whether it is still live, and how long the registration lasts.
// When the elector may lead ($9), it also names itself as the successor
// (the last to register is named), so that a resignation hands it the next
// term in its own statement (see sqlResign).
// $1 namespace, $2 election, $3 µs (the elector's TTL), $4 owner, $5 member
// token, $6 host, $7 pid, $8 app version, $9 may lead.
const sqlElectionWait = `
WITH lk AS (
    SELECT t.namespace, t.election FROM {{schema}}.leaders t
    WHERE t.namespace = $1 AND t.election = $2
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE {{schema}}.leaders t
SET waiting_until = greatest(t.waiting_until, t.expires_at + $3::bigint * interval '1 microsecond'),
    next_owner = CASE WHEN $9::bool THEN $4 ELSE t.next_owner END,
    next_member = CASE WHEN $9::bool THEN $5::bigint ELSE t.next_member END,
    next_host = CASE WHEN $9::bool THEN $6 ELSE t.next_host END,
    next_pid = CASE WHEN $9::bool THEN $7::int ELSE t.next_pid END,
    next_app_version = CASE WHEN $9::bool THEN $8 ELSE t.next_app_version END,
    next_ttl_us = CASE WHEN $9::bool THEN $3::bigint ELSE t.next_ttl_us END
FROM lk WHERE t.namespace = lk.namespace AND t.election = lk.election
RETURNING t.term, t.expires_at > pg_catalog.clock_timestamp(), t.waiting_until - pg_catalog.clock_timestamp()`

// sqlJoin writes this elector's member row, minting its token. It also
// deletes the group's rows of other owners expired for over a minute
// (crashed electors: a stopped one deletes its own), so the table does not
// grow with every crash. A row of the same owner is overwritten only when
// it expired or is this elector's own ($8, its previous token): a live row
// of another running elector with the same Owner is left alone, and no row
// is returned.
// $1 namespace, $2 election, $3 owner, $4 host, $5 pid, $6 app version,
// $7 ttl µs, $8 this elector's previous member token (0: none).
const sqlJoin = `
WITH gc AS (
    DELETE FROM {{schema}}.members
    WHERE namespace = $1 AND election = $2 AND owner <> $3
      AND expires_at < pg_catalog.clock_timestamp() - interval '1 minute'
)
INSERT INTO {{schema}}.members AS m
    (namespace, election, owner, token, host, pid, app_version, started_at, last_poll, expires_at)
VALUES ($1, $2, $3, pg_catalog.nextval({{seq}}), $4, $5, $6,
    pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
    pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond')
ON CONFLICT (namespace, election, owner) DO UPDATE SET
    token = pg_catalog.nextval({{seq}}), host = excluded.host, pid = excluded.pid,
    app_version = excluded.app_version, started_at = pg_catalog.clock_timestamp(),
    last_poll = pg_catalog.clock_timestamp(),
    expires_at = pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond'
WHERE m.expires_at <= pg_catalog.clock_timestamp() OR m.token = $8::bigint
RETURNING m.token, m.started_at, m.expires_at, m.expires_at - pg_catalog.statement_timestamp()`

// sqlLeave deletes this elector's member row, guarded by owner and token.
const sqlLeave = `
DELETE FROM {{schema}}.members
WHERE namespace = $1 AND election = $2 AND owner = $3 AND token = $4`

// sqlLeader reads a group's current, unexpired leader.
const sqlLeader = `
SELECT owner, host, pid, app_version, term, elected_at, expires_at
FROM {{schema}}.leaders
WHERE namespace = $1 AND election = $2 AND expires_at > pg_catalog.clock_timestamp()`

// sqlMembers lists a group's live members; the leader is marked from the
// leaders row, never from a member's report of itself.
const sqlMembers = `
SELECT m.owner, m.host, m.pid, m.app_version, m.started_at, m.last_poll, m.expires_at,
    coalesce(l.owner = m.owner, false)
FROM {{schema}}.members m
LEFT JOIN {{schema}}.leaders l ON l.namespace = m.namespace AND l.election = m.election
    AND l.expires_at > pg_catalog.clock_timestamp()
WHERE m.namespace = $1 AND m.election = $2 AND m.expires_at > pg_catalog.clock_timestamp()
ORDER BY m.started_at, m.owner`

// sqlVerifyTerm checks a term and locks the group's row FOR KEY SHARE until
// the caller's transaction ends: a takeover (FOR UPDATE) waits for it, the
// leader's renewals do not (see sqlCampaign). Unless the session already bounds idle
// transactions, it bounds this one ($3, e.g. '3000ms'): a leader frozen or
// partitioned inside its guarded transaction would otherwise hold the row,
// and with it every election of the group, for as long as its connection
// lives.
const sqlVerifyTerm = `
SELECT term, expires_at > pg_catalog.clock_timestamp(),
    CASE WHEN pg_catalog.current_setting('idle_in_transaction_session_timeout') = '0'
         THEN pg_catalog.set_config('idle_in_transaction_session_timeout', $3, true) END
FROM {{schema}}.leaders
WHERE namespace = $1 AND election = $2
FOR KEY SHARE`

// maxIdleTimeoutMs is the largest idle_in_transaction_session_timeout
// PostgreSQL accepts (INT_MAX milliseconds, about 24.8 days).
const maxIdleTimeoutMs = 1<<31 - 1

// electionSQL is the election statements rendered for one schema.
type electionSQL struct {
	campaign, resign, join, leave, leader, members, verifyTm, wait string
}

// electionSQLCache holds the rendered statements per quoted schema name
// (bounded by the schemas a process uses, not by the clients it creates).
var electionSQLCache sync.Map // string -> *electionSQL

func (c *Client) electionSQL() *electionSQL {
	if v, ok := electionSQLCache.Load(c.sql.schema); ok {
		return v.(*electionSQL)
	}
	r := strings.NewReplacer("{{schema}}", c.sql.schema, "{{seq}}", seqLiteral(c.sql.schema)).Replace
	e := &electionSQL{
		campaign: r(sqlCampaign), resign: r(sqlResign), join: r(sqlJoin), leave: r(sqlLeave),
		leader: r(sqlLeader), members: r(sqlMembers), verifyTm: r(sqlVerifyTerm),
		wait: r(sqlElectionWait),
	}
	v, _ := electionSQLCache.LoadOrStore(c.sql.schema, e)
	return v.(*electionSQL)
}

// notifyElection is the notification kind of a leadership release (see
// listen.go): it wakes the group's followers.
const notifyElection byte = 'g'

// notifyElectionGrant is the notification kind of a term handed over by a
// resignation (sqlResign): the key is the successor's member token.
const notifyElectionGrant byte = 'h'

// electionPayload encodes a group's wake-up as the listener parses it (see
// parsePayload); a test checks the round trip.
func electionPayload(ns, group string) string {
	return fmt.Sprintf("%c%d:%s%s", notifyElection, len(ns), ns, group)
}

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
	// can be elected), on Resign, or when Run's ctx ends; it must return
	// promptly then: Run waits for it before giving leadership up, so a
	// graceful handover never overlaps. Returning early does not end the
	// term.
	OnElected func(ctx context.Context, term int64)

	// OnDemoted is called when a term of this elector ended, after
	// OnElected returned. Never called for an elector that did not lead.
	OnDemoted func(term int64)

	// OnNewLeader is called once per term led by another elector, when this
	// elector first sees it.
	OnNewLeader func(Leader)

	// OnPoll is called after each campaign and, while leading, after each
	// renewal interval. Calls are coalesced when the previous one is still
	// running.
	OnPoll func()
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
}

// term is one term this elector leads.
type term struct {
	lease    *Lease
	resign   chan struct{} // closed by Resign
	resigned sync.Once
	stepping atomic.Bool   // leadership being given up: IsLeader is false
	ended    chan struct{} // closed once the term was released
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
		return nil, invalid("TTL", "must be positive, got %s", opts.TTL)
	}
	o, err := c.resolve(group, ropts)
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
	if t.lease.Err() != nil || !time.Now().Before(t.lease.Deadline()) {
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
	if member != nil && member.Err() == nil {
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
// statement that wakes the followers, so one of them takes over within
// milliseconds. This elector does not campaign again until it has seen
// another leader, or for one TTL. Resign
// waits for the release unless ctx ends first; called with OnElected's ctx
// (or a ctx derived from it) it only requests the handover and returns nil,
// since the handover waits for OnElected to return. It returns nil when
// this elector does not lead.
func (e *Elector) Resign(ctx context.Context) error {
	e.mu.Lock()
	t := e.term
	if t != nil {
		e.holdOff = time.Now().Add(e.ttl)
	}
	e.mu.Unlock()
	if t == nil {
		return nil
	}
	t.stepping.Store(true)
	t.resigned.Do(func() { close(t.resign) })
	if ctx.Value(electedKey{}) == e {
		return nil
	}
	select {
	case <-t.ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sentinel: resign %q/%q: handover not finished (OnElected still running?): %w", e.ns, e.group, context.Cause(ctx))
	}
}

// Run campaigns, leads and follows until ctx ends, the client is closed or
// a callback panics; then it gives up leadership (after OnElected returned)
// and removes its member row. It rides out database outages, retrying
// every Config.WaitRecheck. It returns nil when ctx ended, ErrClosed when
// the client was closed, a *CallbackPanicError when a callback panicked,
// and an error matching ErrNotMigrated at once, without retrying, when the
// client's schema has no Sentinel tables (a wrong Config.Schema, or
// Migrate never ran). One Run at a time per client, namespace and group.
func (e *Elector) Run(ctx context.Context) (err error) {
	if err := e.c.checkOpen(); err != nil {
		return err
	}
	id := electorID{e.c, e.ns, e.group}
	if _, busy := runningElectors.LoadOrStore(id, struct{}{}); busy {
		return invalid("elector", "an elector for %q/%q is already running in this client; use one per client", e.ns, e.group)
	}
	defer runningElectors.Delete(id)
	if !e.running.CompareAndSwap(false, true) {
		return invalid("elector", "Run is already running")
	}
	defer e.running.Store(false)

	e.mu.Lock()
	e.panicErr, e.panicked = nil, make(chan struct{})
	e.mu.Unlock()
	cb := newCallbacks(e)
	defer func() {
		cb.stop()
		// A callback that panicked while Run was stopping (OnDemoted of
		// the last term, say) is reported, not swallowed.
		e.mu.Lock()
		p := e.panicErr
		e.mu.Unlock()
		if p != nil && err == nil {
			err = p
		}
	}()

	wake, _ := e.c.ln.subscribe(ctx, notifyElection, e.ns, e.group)
	defer e.c.ln.unsubscribe(notifyElection, e.ns, e.group, wake)

	defer e.leave()
	var seenTerm int64
	lockedBackoff := 10 * time.Millisecond // see the follower's sleep below
	// A resignation notifies only while some elector of the group is
	// registered as waiting (leaders.waiting_until, migration 7): a
	// transaction that calls NOTIFY serializes its commit on a
	// database-wide lock. A follower of a live leader registers
	// (sqlElectionWait) before it sleeps, and never misses a wake-up:
	//
	//   - It LISTENs before its first campaign (subscribe), so every
	//     notification sent after its registration commits reaches it.
	//   - The registration and a resignation both update the group's row,
	//     so its row lock orders them. If the registration comes first,
	//     the resignation's UPDATE is made from the version it wrote (read
	//     committed re-reads the newest version of a row it updates) and
	//     its RETURNING sees the registration: it notifies. If the
	//     resignation comes first, the registration, which locks the row
	//     after it committed, reads the term expired (or a newer term) and
	//     the follower campaigns at once.
	//   - A registration that finds the row locked (a renewal, a
	//     resignation, a takeover under way) registers nothing; the
	//     follower re-checks soon, backing off up to WaitRecheck, and
	//     registers again.
	//   - A registration lasts one TTL past the term's expiry at the time,
	//     longer than the sleep it covers (until that expiry), and the
	//     follower registers again before any sleep it does not cover. One
	//     left by an elector that stopped or died costs a NOTIFY per
	//     resignation until it expires, never a missed wake-up; there is no
	//     count to take back, so none can go wrong.
	var waiting time.Time // registered as waiting until then at least (local clock)
	var regTerm int64     // the term the registration was made under
	var regNamed bool     // the registration named this elector the successor
	var grantKey string   // the member token this elector listens on for a handed-over term
	defer func() {
		if grantKey != "" {
			e.c.ln.drop(notifyElectionGrant, e.ns, grantKey, wake)
		}
	}()
	waitBackoff := 10 * time.Millisecond
	for {
		if err := e.stopReason(ctx); err != nil {
			return filterCtx(ctx, err)
		}
		// Every statement is bounded by the TTL: one stuck on a dead
		// connection must not keep this elector out of the next election.
		jctx, cancel := context.WithTimeout(ctx, e.ttl)
		err := e.ensureMember(jctx)
		cancel()
		if err != nil {
			if e.stopReason(ctx) != nil {
				continue
			}
			if errors.Is(err, ErrNotMigrated) {
				return err // no retry will create the tables
			}
			e.c.cfg.Logger.Warn("sentinel: elector: joining failed; retrying", "group", e.group, "err", err)
			e.sleep(ctx, wake, e.c.cfg.WaitRecheck)
			continue
		}
		e.mu.Lock()
		mayLead := !time.Now().Before(e.holdOff)
		holdOff := e.holdOff
		member := e.member
		e.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, e.ttl)
		res, err := e.campaign(cctx, mayLead, member.token)
		cancel()
		if err != nil {
			if e.stopReason(ctx) != nil {
				continue
			}
			if errors.Is(err, ErrNotMigrated) {
				return err
			}
			e.c.cfg.Logger.Warn("sentinel: elector: campaign failed; retrying", "group", e.group, "err", err)
			cb.poll()
			e.sleep(ctx, wake, e.c.cfg.WaitRecheck)
			continue
		}
		if res.acquired {
			seenTerm, lockedBackoff = res.leader.Term, 10*time.Millisecond
			cb.poll()
			if err := e.lead(ctx, res, cb); err != nil {
				return err
			}
			continue
		}
		// Whether another elector leads is decided by the term, not the
		// Owner: a term this elector did not lead is another's, even one
		// of a client configured with the same Owner.
		e.mu.Lock()
		sawOther := res.leader != nil && res.leader.Term != e.led
		if sawOther {
			// Another elector leads, or led since this one's last term
			// (its row may be released already): a resignation's hold-off
			// has done its job, and this elector may take over when that
			// one goes.
			e.holdOff = time.Time{}
		}
		e.mu.Unlock()
		other := sawOther && res.live
		if res.leader != nil && res.leader.Term != seenTerm && res.live {
			seenTerm = res.leader.Term
			if other {
				cb.newLeader(*res.leader)
			}
		}
		cb.poll()
		// Sleep until the leader's expiry as the database computed it; a
		// release notification wakes us sooner.
		var delay time.Duration
		switch {
		case res.leader == nil: // no row, and we may not lead yet
			delay = time.Until(holdOff)
		case res.live:
			delay = time.Until(res.localExpiry) + time.Millisecond
		case !mayLead && sawOther:
			// Another elector was elected (and has let go) since this one
			// resigned: the hold-off is over, campaign again now.
			delay = 0
		case !mayLead:
			// No live leader (our own released row, say), but we may not
			// lead before the hold-off ends: sleep until then, or until
			// another elector's release wakes us. (This case used to
			// read as "locked" and poll every 10 ms.)
			delay = time.Until(holdOff)
		default:
			// Expired but locked by another transaction (a guarded
			// transaction of the old term, a competing campaign): no
			// notification marks its end, so back off, doubling up to a
			// tenth of the TTL, rather than poll.
			delay = lockedBackoff
			lockedBackoff = min(2*lockedBackoff, max(e.ttl/10, 10*time.Millisecond))
		}
		if res.live || !mayLead {
			lockedBackoff = 10 * time.Millisecond
		}
		if !mayLead {
			delay = min(delay, time.Until(holdOff))
		}
		listening := e.c.ln.listening()
		if !listening {
			delay = min(delay, e.c.cfg.WaitRecheck)
		}
		e.mu.Lock()
		mayNow := !time.Now().Before(e.holdOff)
		var memberTok int64
		if e.member != nil {
			memberTok = e.member.token
		}
		e.mu.Unlock()
		if listening && res.live && (time.Until(waiting) <= delay || res.leader.Term != regTerm || (mayNow && !regNamed)) {
			// Register as waiting, so that a resignation notifies (see
			// the comment above the loop); a registration that still
			// covers this sleep, made under this term, is kept. An
			// elector that may lead also names itself the successor, so
			// the resignation hands it the term (sqlResign); it listens
			// for that grant, by its member token, before registering.
			if k := strconv.FormatInt(memberTok, 10); memberTok != 0 && k != grantKey {
				if grantKey != "" {
					e.c.ln.drop(notifyElectionGrant, e.ns, grantKey, wake)
				}
				e.c.ln.subscribeTo(notifyElectionGrant, e.ns, k, wake)
				grantKey = k
			}
			term, live, until, in := e.waitJoin(ctx, memberTok, mayNow)
			switch {
			case in && (!live || term != res.leader.Term):
				continue // resigned (or taken over) meanwhile: campaign now
			case in:
				waiting, waitBackoff = until, 10*time.Millisecond
				regTerm, regNamed = term, mayNow && memberTok != 0
				delay = min(delay, time.Until(waiting))
			default:
				// Not registered (the row was locked, or an error):
				// nothing may notify; re-check soon, backing off.
				delay = min(delay, waitBackoff)
				waitBackoff = min(2*waitBackoff, e.c.cfg.WaitRecheck)
			}
		}
		e.sleep(ctx, wake, max(delay, time.Millisecond))
	}
}

// memberToken is this run's member token, 0 before joining.
func (e *Elector) memberToken() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.member == nil {
		return 0
	}
	return e.member.token
}

// waitJoin registers this elector as waiting for the group's hand-off
// (sqlElectionWait). in says whether it was registered (not when the row
// was locked or missing, or on an error); term and live are the group's
// term then and whether it was unexpired; until is when the registration
// ends at the earliest, by the local clock.
func (e *Elector) waitJoin(ctx context.Context, member int64, mayLead bool) (term int64, live bool, until time.Time, in bool) {
	wctx, cancel := context.WithTimeout(ctx, e.ttl)
	defer cancel()
	sent := time.Now()
	var left time.Duration
	err := e.c.pool.QueryRow(wctx, e.sql.wait, e.ns, e.group, us(e.ttl), e.c.cfg.Owner, member, e.c.cfg.Host, e.c.cfg.PID,
		e.opts.AppVersion, mayLead && member != 0).Scan(&term, &live, &left)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) && ctx.Err() == nil {
			e.c.cfg.Logger.Warn("sentinel: elector: registering as waiting failed; re-checking", "group", e.group, "err", err)
		}
		return 0, false, time.Time{}, false
	}
	return term, live, sent.Add(left), true
}

func filterCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// stopReason says why Run must stop, or nil.
func (e *Elector) stopReason(ctx context.Context) error {
	e.mu.Lock()
	p := e.panicErr
	e.mu.Unlock()
	switch {
	case p != nil:
		return p
	case e.c.checkOpen() != nil:
		return ErrClosed
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return nil
}

func (e *Elector) sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	e.mu.Lock()
	panicked := e.panicked
	var memberDone <-chan struct{}
	if e.member != nil && e.member.Err() == nil { // a dead one would wake us at once, forever
		memberDone = e.member.Done()
	}
	e.mu.Unlock()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	case <-panicked:
	case <-memberDone:
	}
}

type campaignResult struct {
	acquired    bool
	live        bool // the leader row is unexpired
	leader      *Leader
	remaining   time.Duration
	localExpiry time.Time
	sent        time.Time
}

func (e *Elector) campaign(ctx context.Context, mayLead bool, memberToken int64) (campaignResult, error) {
	var r campaignResult
	var l Leader
	var now time.Time
	r.sent = time.Now()
	err := e.c.pool.QueryRow(ctx, e.sql.campaign, e.ns, e.group, e.c.cfg.Owner, e.c.cfg.Host, e.c.cfg.PID,
		e.opts.AppVersion, us(e.ttl), mayLead, memberToken).
		Scan(&r.acquired, &l.Owner, &l.Host, &l.PID, &l.AppVersion, &l.Term, &l.ElectedAt, &l.ExpiresAt, &r.remaining, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, nil // no leader row yet (and we may not take it)
	}
	if err != nil {
		return r, e.c.wrapErr(fmt.Sprintf("elector %q/%q: campaign", e.ns, e.group), err)
	}
	l.Namespace, l.Group = e.ns, e.group
	r.leader = &l
	r.live = r.remaining > 0
	r.localExpiry = r.sent.Add(r.remaining)
	e.mu.Lock()
	e.lastPoll = now
	e.mu.Unlock()
	return r, nil
}

// ensureMember writes the member row when this run has none (or lost it).
func (e *Elector) ensureMember(ctx context.Context) error {
	e.mu.Lock()
	m := e.member
	e.mu.Unlock()
	if m != nil && m.Err() == nil {
		return nil
	}
	var prev int64
	if m != nil {
		e.c.hb.remove(m)
		prev = m.token
	}
	sent := time.Now()
	var token int64
	var started, expires time.Time
	var remaining time.Duration
	err := e.c.pool.QueryRow(ctx, e.sql.join, e.ns, e.group, e.c.cfg.Owner, e.c.cfg.Host, e.c.cfg.PID,
		e.opts.AppVersion, us(e.ttl), prev).Scan(&token, &started, &expires, &remaining)
	if errors.Is(err, pgx.ErrNoRows) {
		// Another running elector uses this Owner (or a crashed process
		// with the same Owner left its row: it expires within a TTL).
		// Sharing its member row would make the two overwrite each other;
		// wait for the row to expire instead.
		return fmt.Errorf("sentinel: elector %q/%q: another elector with Owner %q is running (its member row is live); "+
			"Owner must be unique among running clients: waiting for that row to expire", e.ns, e.group, e.c.cfg.Owner)
	}
	if err != nil {
		return e.c.wrapErr(fmt.Sprintf("elector %q/%q: join", e.ns, e.group), err)
	}
	l := e.c.newLease(kindMember, e.ns, e.group, token, e.ttl)
	if !e.c.hb.add(l, sent, remaining, expires, time.Time{}) {
		// Close began while the join was in flight: nobody would renew
		// the row. Delete it now rather than leave it listed for a TTL.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.c.cfg.ReleaseTimeout)
		defer cancel()
		_, _ = e.c.pool.Exec(dctx, e.sql.leave, e.ns, e.group, e.c.cfg.Owner, token)
		l.end(ErrReleased)
		return ErrClosed
	}
	e.mu.Lock()
	e.member, e.started, e.lastPoll = l, started, started
	e.mu.Unlock()
	return nil
}

// rejoinAsync rewrites a lost member row without blocking the leader's
// loop: that loop must stay free to see its term end (a statement may hang
// on a dead connection for as long as the network lets it).
func (e *Elector) rejoinAsync(ctx context.Context) {
	e.mu.Lock()
	m := e.member
	busy := e.rejoining
	if busy || (m != nil && m.Err() == nil) {
		e.mu.Unlock()
		return
	}
	e.rejoining = true
	e.mu.Unlock()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		jctx, cancel := context.WithTimeout(ctx, e.ttl)
		defer cancel()
		if err := e.ensureMember(jctx); err != nil {
			e.c.cfg.Logger.Warn("sentinel: elector: rejoining failed; retrying", "group", e.group, "err", err)
		}
		e.mu.Lock()
		e.rejoining = false
		e.mu.Unlock()
	}()
}

// leave stops renewing the member row and deletes it.
func (e *Elector) leave() {
	e.bg.Wait()
	e.mu.Lock()
	m := e.member
	e.member = nil
	e.mu.Unlock()
	if m == nil {
		return
	}
	e.c.hb.remove(m)
	ctx, cancel := context.WithTimeout(context.Background(), e.c.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := e.c.pool.Exec(ctx, e.sql.leave, e.ns, e.group, e.c.cfg.Owner, m.token); err != nil {
		e.c.cfg.Logger.Warn("sentinel: elector: removing member row failed; it expires by itself", "group", e.group, "err", err)
	}
	m.end(ErrReleased)
}

// lead runs one term: it starts OnElected, waits for a reason to stop,
// cancels OnElected's ctx, waits for it to return, then releases the term.
// It returns an error only when Run must stop with it (a panic, or
// ErrClosed for a term won while the client was closing).
func (e *Elector) lead(ctx context.Context, res campaignResult, cb *callbacks) error {
	tm := &term{resign: make(chan struct{}), ended: make(chan struct{})}
	l := e.c.newLease(kindLeader, e.ns, e.group, res.leader.Term, e.ttl)
	l.acquiredAt = res.leader.ElectedAt
	if !e.c.hb.add(l, res.sent, res.remaining, res.leader.ExpiresAt, time.Time{}) {
		// Close began while the campaign was in flight: nobody would renew
		// this term, arm its deadline or cancel OnElected. Give it back at
		// once (waking the followers) without starting OnElected, and stop.
		rctx, cancel := context.WithTimeout(context.Background(), e.c.cfg.ReleaseTimeout)
		var n int64
		err := e.c.pool.QueryRow(rctx, e.sql.resign, e.ns, e.group, e.c.cfg.Owner, l.token, e.c.sql.channel,
			electionPayload(e.ns, e.group), e.memberToken()).Scan(&n)
		cancel()
		if err != nil {
			e.c.cfg.Logger.Warn("sentinel: elector: releasing a term won as the client closed failed; it expires within its TTL",
				"group", e.group, "term", l.token, "err", err)
		}
		l.end(ErrReleased)
		return ErrClosed
	}
	tm.lease = l
	e.mu.Lock()
	e.term, e.led = tm, l.token
	panicked := e.panicked
	e.mu.Unlock()
	e.c.cfg.Logger.Info("sentinel: elected", "namespace", e.ns, "group", e.group, "term", l.token)
	if o := e.c.observer(); o != nil && o.TermChanged != nil {
		o.TermChanged(TermChange{Namespace: e.ns, Group: e.group, Term: l.token, Leader: e.c.cfg.Owner, Self: true})
	}

	lctx, lcancel := context.WithCancelCause(context.WithValue(ctx, electedKey{}, e))
	defer lcancel(nil)
	done := make(chan struct{})
	if e.opts.OnElected != nil {
		go func() {
			defer close(done)
			defer func() {
				if v := recover(); v != nil {
					e.recordPanic("OnElected", v)
				}
			}()
			e.opts.OnElected(lctx, l.token)
		}()
	} else {
		close(done)
	}

	tick := time.NewTicker(l.renewEvery)
	defer tick.Stop()
	var cause error
	for cause == nil {
		select {
		case <-l.Done():
			cause = l.Err()
		case <-tm.resign:
			cause = errResigned
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-panicked:
			cause = errCallbackPanicked
		case <-tick.C:
			cb.poll()
			e.rejoinAsync(ctx)
		}
	}
	tm.stepping.Store(true)
	lcancel(fmt.Errorf("sentinel: leadership of %q/%q (term %d) ending: %w", e.ns, e.group, l.token, cause))
	<-done // a graceful handover never overlaps the old leader's callback

	// Release, guarded by owner and term: the row is ours until it
	// expires, and OnElected has returned. A term that was taken over has
	// nothing to release; one whose local deadline passed may still be
	// released early, but trying past the row's expiry is pointless.
	e.c.hb.remove(l)
	var stale *StaleTokenError
	if !errors.As(l.Err(), &stale) {
		until := time.Now().Add(e.c.cfg.ReleaseTimeout)
		if l.Err() != nil {
			until = l.Deadline().Add(l.margin)
		}
		rctx, cancel := context.WithDeadline(context.Background(), until)
		var n int64
		err := e.c.pool.QueryRow(rctx, e.sql.resign, e.ns, e.group, e.c.cfg.Owner, l.token, e.c.sql.channel,
			electionPayload(e.ns, e.group), e.memberToken()).Scan(&n)
		cancel()
		if err != nil && rctx.Err() == nil {
			e.c.cfg.Logger.Warn("sentinel: elector: releasing leadership failed; it expires within its TTL", "group", e.group, "term", l.token, "err", err)
		}
	}
	l.end(ErrReleased)
	e.mu.Lock()
	e.term = nil
	e.mu.Unlock()
	close(tm.ended)
	e.bg.Wait() // a member rewrite started while leading (bounded by the TTL)
	e.c.cfg.Logger.Info("sentinel: demoted", "namespace", e.ns, "group", e.group, "term", l.token, "cause", cause)
	cb.demoted(l.token)
	if errors.Is(cause, errCallbackPanicked) {
		e.mu.Lock()
		p := e.panicErr
		e.mu.Unlock()
		return p
	}
	return nil
}

var (
	errResigned         = errors.New("sentinel: resigned")
	errCallbackPanicked = errors.New("sentinel: a callback panicked")
)

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
	wake       chan struct{}
	quit       chan struct{}
	done       chan struct{}
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

func (cb *callbacks) demoted(term int64) {
	if o := cb.e.c.observer(); o != nil && o.TermChanged != nil {
		o.TermChanged(TermChange{Namespace: cb.e.ns, Group: cb.e.group, Term: term, Leader: cb.e.c.cfg.Owner, Self: true, Demoted: true})
	}
	if f := cb.e.opts.OnDemoted; f != nil {
		cb.push(func() { cb.call("OnDemoted", func() { f(term) }) }, false)
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
// database clock). Options: WithNamespace.
func (c *Client) Leader(ctx context.Context, group string, opts ...Option) (*Leader, error) {
	o, err := c.resolve(group, opts)
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
func (c *Client) Members(ctx context.Context, group string, opts ...Option) ([]Member, error) {
	o, err := c.resolve(group, opts)
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
//		tx.Rollback(ctx) // a newer leader exists: write nothing
//		return err
//	}
//	tx.Exec(ctx, "INSERT INTO runs ...")
//	tx.Commit(ctx)
//
// A guarded transaction holds off the next election for as long as it is
// open, so keep it short. Unless the session sets
// idle_in_transaction_session_timeout itself,
// VerifyTerm bounds the transaction's idle time to the TTL (SET LOCAL), so
// a leader frozen or cut off in the middle of it cannot block the next
// election for longer (PostgreSQL caps that setting at about 24.8 days,
// 2^31-1 ms: a longer TTL bounds it to that). Options: WithNamespace,
// WithTTL (the election's TTL; default Config.DefaultTTL).
func (c *Client) VerifyTerm(ctx context.Context, q Querier, group string, term int64, opts ...Option) error {
	if q == nil {
		return invalid("querier", "must not be nil")
	}
	o, err := c.resolve(group, opts)
	if err != nil {
		return err
	}
	if term <= 0 {
		return invalid("term", "must be positive, got %d", term)
	}
	var current int64
	var alive bool
	var set *string
	idle := min(max(o.ttl.Milliseconds(), 1), maxIdleTimeoutMs)
	err = q.QueryRow(ctx, c.electionSQL().verifyTm, o.namespace, group, fmt.Sprintf("%dms", idle)).
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
