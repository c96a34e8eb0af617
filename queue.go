package sentinel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fair queue lock (turn, on PostgreSQL).
//
// Every Turn draws a ticket from the fencing_token sequence and waits until
// its ticket is the lowest live ticket of its resource. The holder is
// derived, never stored: a ticket is served by one statement that checks,
// on the database clock, that no lower ticket is alive, and skips (deletes)
// the lower ones that are dead in the same statement.
//
// Why no later ticket is ever served before an earlier live one:
//
//   - Drawing locks the resource's row in queues (FOR UPDATE) and mints the
//     ticket while holding that lock, so on one resource tickets commit in
//     the order of their numbers: once a ticket is visible to a serving
//     check, no lower ticket can appear later.
//   - The serving check deletes a lower ticket only if it is expired by the
//     database clock when the DELETE holds its row lock (READ COMMITTED
//     re-checks the condition on the newest row version), and serves only if
//     every lower ticket of its snapshot was deleted by that very DELETE.
//     A lower ticket renewed concurrently (its renewal locks the row) is
//     therefore never counted as dead, and a renewal never revives a ticket
//     whose expiry passed: it is guarded by expires_at > clock_timestamp()
//     under the same row lock.
//   - A holder's local deadline (Done) is the send time of its last
//     successful renewal + TTL - safety margin: before the database clock can
//     see its ticket expired, hence before anyone behind can be served.

// kindTicket is the heartbeat kind of a ticket row (see renewKinds in
// queries.go). It only
// needs to differ from the other kinds; the integrator may renumber it.
const kindTicket leaseKind = 12

// MaxLabelLen is the longest label a Turn accepts, in bytes.
const MaxLabelLen = 256

// Queue event types, in the history and in FollowQueues.
const (
	QueueAssigned  = "assigned"  // a ticket was drawn (with its label)
	QueueGranted   = "granted"   // a ticket was served: its holder may work
	QueueCompleted = "completed" // the holder released its turn
	QueueCancelled = "cancelled" // a waiter left before being served
	QueueCrashed   = "crashed"   // a served ticket expired (its holder died or froze) and was removed
	QueueBumped    = "bumped"    // a waiting ticket expired and was skipped
)

// ErrQueueBusy reports that ResetQueue found a live holder or waiter on the
// resource; nothing was removed. The error is a *QueueBusyError.
var ErrQueueBusy = errors.New("sentinel: queue busy")

// QueueBusyError reports a queue that ResetQueue refused to reset. It
// matches ErrQueueBusy.
type QueueBusyError struct {
	Namespace string
	Resource  string
	Live      int // live tickets (holder and waiters) at the time of the call
}

func (e *QueueBusyError) Error() string {
	return fmt.Sprintf("sentinel: queue %q/%q busy: %d live ticket(s); nothing removed. Reset only clears dead tickets: "+
		"wait for the holder and waiters to finish (see Client.Queue)", e.Namespace, e.Resource, e.Live)
}

// Unwrap returns ErrQueueBusy.
func (e *QueueBusyError) Unwrap() error { return ErrQueueBusy }

// WithLabel sets the label of a Turn's ticket: it shows in Queue and Queues
// and in progression events (`printer: 5 assigned to "nightly report"`).
// At most MaxLabelLen bytes of UTF-8 without NUL. Default "".
func WithLabel(label string) Option {
	return func(o *callOptions) { o.label, o.labelSet = label, true }
}

// WithAfterEvent makes FollowQueues deliver the queue events whose ID
// (QueueEvent.ID) is greater than id, including those recorded before it
// started, instead of only the events recorded from now on: pass the ID of
// the last event a previous follower delivered to resume without a gap, or
// 0 to replay the whole recorded history first. It must not be negative.
func WithAfterEvent(id int64) Option {
	return func(o *callOptions) { o.after, o.afterSet = id, true }
}

// notifyQueueSQL is the payload of a follow notification for namespace $1.
const notifyQueueSQL = `'q' || pg_catalog.octet_length($1::text)::text || ':' || $1::text`

// followersCTE defines fw, the registration of namespace $1's followers
// (queue_followers.following_until, see FollowQueues), for a statement that
// records queue events: it notifies them only while one is registered. done
// is an SQL condition that holds once the statement has recorded its events
// and finished every write that may wait for a row lock; fw is read only
// then, so the queue_followers row is the last row the statement locks.
//
//   - fl locks the row FOR SHARE and reads it. FOR SHARE conflicts with the
//     follower's registration (an UPDATE), and a locking read returns the
//     newest committed version of the row, not the snapshot's: read
//     committed re-reads a row updated since. Share locks do not conflict
//     with each other, so statements that record events never wait for one
//     another here.
//   - fi runs only when the snapshot has no row (the namespace's first
//     events, or a follower that registered since the snapshot was taken):
//     it inserts the row, and on a conflict with a row committed or being
//     inserted meanwhile it waits for that one and locks it (a no-op
//     update), which also returns its newest version. So whether the row
//     existed or not, the registration read is the newest, under a lock
//     held until commit.
func followersCTE(done string) string {
	return `fl AS (
    SELECT f.following_until FROM {{schema}}.queue_followers f
    WHERE f.namespace = $1 AND (` + done + `)
    FOR SHARE
),
fi AS (
    INSERT INTO {{schema}}.queue_followers AS f (namespace)
    SELECT $1::text WHERE (` + done + `) AND NOT EXISTS (SELECT 1 FROM fl)
    ON CONFLICT (namespace) DO UPDATE SET following_until = f.following_until
    RETURNING f.following_until
),
fw AS (SELECT fl.following_until FROM fl UNION ALL SELECT fi.following_until FROM fi)`
}

// notifyFollowersSQL notifies namespace $1's followers on channel ch when
// fw (see followersCTE) says one is registered.
func notifyFollowersSQL(ch string) string {
	return `LEFT JOIN LATERAL (SELECT pg_catalog.pg_notify(` + ch + `, ` + notifyQueueSQL + `)
    FROM fw WHERE fw.following_until > pg_catalog.clock_timestamp()) AS nf ON true`
}

// sqlDraw draws a ticket: it locks the resource's queue row FOR UPDATE
// (creating it on the first draw), mints the ticket under that lock,
// inserts it, and records `assigned`. The row is locked, never updated:
// drawers wait on one row version, in the order they asked (PostgreSQL's
// tuple lock queue), rather than retrying against a chain of new versions
// where a newcomer could overtake them. The time left is computed at the
// end, so a wait for the lock only shortens what the client trusts.
//
// The draw commits without waiting for its WAL to reach disk
// (synchronous_commit off, for this transaction only): it holds the queue
// row's lock until it commits, and every leave of the resource waits for
// that lock, so a draw that waited for its flush delayed the next handover
// by a disk flush. Nothing a holder relies on is made non-durable by it:
//
//   - a drawn ticket grants nothing. It is trusted only once served, and
//     serving is a durable commit made after the draw committed: the
//     leave that grants it (sqlTicketLeave) or its own serving check
//     (sqlServe, which writes served_at). A commit flushes the WAL up to
//     its own record, and the draw's records (the sequence's advance that
//     minted the ticket, the ticket row) were written before it, so by
//     the time a holder is told its turn the ticket is as durable as its
//     grant, and the token sequence cannot move back below it after a
//     crash;
//   - a draw lost in a crash (committed, not yet flushed) loses a waiting
//     ticket: its client's next renewal finds the row gone, and Turn draws
//     again, as for a ticket that died while waiting. The `assigned` event
//     goes with it; a follower may have seen it.
//
// It returns no row when the queue row was created by a concurrent draw
// after this statement's snapshot (only on a resource's first draws): the
// caller runs it again. It notifies followers only while one is registered
// (followersCTE), after the ticket is inserted, so the followers' row is
// the last it locks.
// $1 namespace, $2 resource, $3 label, $4 owner, $5 host, $6 pid, $7 ttl µs,
// $8 channel, $9 count the live tickets ahead (the queue's depth, for the
// observer; -1 without counting: the subquery is then not run).
var sqlDraw = `
WITH ins AS (
    INSERT INTO {{schema}}.queues AS q (namespace, resource, created_at)
    VALUES ($1, $2, pg_catalog.clock_timestamp())
    ON CONFLICT (namespace, resource) DO NOTHING
    RETURNING q.namespace, q.resource
),
lk AS (
    SELECT q.namespace, q.resource FROM {{schema}}.queues q
    WHERE q.namespace = $1 AND q.resource = $2
    FOR UPDATE
),
q AS (SELECT * FROM ins UNION ALL SELECT * FROM lk),
t AS (
    INSERT INTO {{schema}}.tickets (namespace, resource, ticket, label, owner, host, pid, drawn_at, expires_at)
    SELECT q.namespace, q.resource, pg_catalog.nextval({{seq}}), $3, $4, $5, $6,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond'
    FROM q
    RETURNING ticket, drawn_at, expires_at
),
ev AS (
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
    SELECT $1, $2, t.ticket, 'assigned', $3, $4 FROM t
),
` + followersCTE(`(SELECT pg_catalog.count(*) FROM t) > 0`) + `
SELECT t.ticket, t.drawn_at, t.expires_at, t.expires_at - pg_catalog.clock_timestamp(),
    CASE WHEN $9::boolean THEN (
        SELECT pg_catalog.count(*) FROM {{schema}}.tickets x
        WHERE x.namespace = $1 AND x.resource = $2 AND x.ticket < t.ticket
          AND x.expires_at > pg_catalog.clock_timestamp()
    ) ELSE -1 END
FROM t CROSS JOIN (SELECT pg_catalog.set_config('synchronous_commit', 'off', true)) AS async
` + notifyFollowersSQL(`$8`)

// sqlServe is the serving check of ticket $3, in one statement:
//
//   - me: the ticket itself, live and owned by $4;
//   - mw: the same, only while it is not served yet: a ticket already
//     granted (by its predecessor's leave, sqlTicketLeave) only reads its
//     grant here, and the statement writes nothing (no commit to flush);
//   - dead: lower tickets expired by the database clock are deleted (a row
//     locked by a renewal is waited for and re-checked, so a ticket renewed
//     meanwhile is kept);
//   - blk: lower tickets of the snapshot that dead did not delete;
//   - g: the ticket is served (served_at set) when blk is empty;
//   - ev: `crashed`/`bumped` for every skipped ticket, `granted` once.
//
// It returns whether the ticket is alive, whether it is served, its
// immediate live predecessor, that one's time left (the fallback re-check)
// and owner, and whether a dead lower ticket is being removed by someone
// else (re-check soon). When it recorded events it notifies followers
// while one is registered (followersCTE), once dead and g are done.
// $1 namespace, $2 resource, $3 ticket, $4 owner, $5 channel.
var sqlServe = `
WITH me AS (
    SELECT t.label, t.served_at FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4
      AND t.expires_at > pg_catalog.clock_timestamp()
),
mw AS (SELECT me.label FROM me WHERE me.served_at IS NULL),
dead AS (
    DELETE FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket < $3
      AND t.expires_at <= pg_catalog.clock_timestamp() AND EXISTS (SELECT 1 FROM mw)
    RETURNING t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
),
blk AS (
    SELECT t.ticket, t.owner, t.expires_at FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket < $3 AND EXISTS (SELECT 1 FROM mw)
      AND NOT EXISTS (SELECT 1 FROM dead WHERE dead.ticket = t.ticket)
),
g AS (
    UPDATE {{schema}}.tickets t SET served_at = coalesce(t.served_at, pg_catalog.clock_timestamp())
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4
      AND t.expires_at > pg_catalog.clock_timestamp()
      AND EXISTS (SELECT 1 FROM mw) AND NOT EXISTS (SELECT 1 FROM blk)
    RETURNING t.expires_at, t.served_at
),
ev AS (
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner, by_ticket)
    SELECT $1, $2, d.ticket, CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END, d.label, d.owner, $3::bigint
    FROM dead d
    UNION ALL
    SELECT $1, $2, $3, 'granted', mw.label, $4, NULL FROM mw, g
    RETURNING 1
),
p AS (
    SELECT b.ticket, b.owner, b.expires_at - pg_catalog.clock_timestamp() AS left FROM blk b
    WHERE b.expires_at > pg_catalog.clock_timestamp()
    ORDER BY b.ticket DESC LIMIT 1
),
` + followersCTE(`(SELECT pg_catalog.count(*) FROM ev) > 0 AND (SELECT pg_catalog.count(*) FROM g) >= 0`) + `
SELECT EXISTS (SELECT 1 FROM me), EXISTS (SELECT 1 FROM g) OR EXISTS (SELECT 1 FROM me WHERE me.served_at IS NOT NULL),
    coalesce((SELECT p.ticket FROM p), 0), coalesce((SELECT p.left FROM p), interval '0'), coalesce((SELECT p.owner FROM p), ''),
    EXISTS (SELECT 1 FROM blk WHERE blk.expires_at <= pg_catalog.clock_timestamp())
FROM (SELECT 1) AS one
` + notifyFollowersSQL(`$5`)

// sqlTicketLeave removes ticket $3 (release by its holder, cancellation by a
// waiter, Close), records `completed`/`cancelled` (or `crashed`/`bumped`
// when it had expired) and, when no live ticket remains below it, hands the
// turn over in the same statement: the next live ticket (nx) is granted
// (served_at set, `granted` recorded) and only that ticket is notified. Its
// waiter then only reads its grant (sqlServe writes nothing for a ticket
// already served): a handover costs this one commit and one wake-up.
//
// The grant is the serving check of sqlServe made on nx's behalf, under the
// queue row's lock (see Turn.leave), so nothing can be drawn below nx
// meanwhile:
//
//   - dc locks the other tickets below nx whose expiry passed on the
//     database clock, skipping rows locked elsewhere (a renewal, or a
//     VerifyTurn transaction: the leave holds the queue lock and must not
//     wait for those); FOR UPDATE re-checks the expiry on the newest row
//     version, and a renewal never revives an expired ticket, so a row it
//     returns is dead for good; dead deletes them;
//   - blk is every other ticket below nx in the snapshot that dead did not
//     delete: a live one, or a dead one locked elsewhere;
//   - gl locks nx's row when blk is empty and nx is still live and not
//     served (re-checked on the newest row version), skipping it when
//     another transaction holds it: nx's own leave (which waits for the
//     queue lock this transaction holds: waiting for it would deadlock), a
//     renewal or a VerifyTurn; g grants it, so a granted ticket is the
//     lowest ticket of the resource, exactly as if its own serving check
//     had served it.
//
// When the grant cannot be made (blk not empty, nx expired or locked
// meanwhile) nx is still notified: its own serving check (sqlServe) then decides, as before.
// The targeted NOTIFY goes only to a registered waiter: the next live
// ticket is a Turn that waits (or is about to check, after subscribing, and
// then sees this leave committed), kept alive by its client's heartbeat;
// when there is none nothing is sent. Followers are notified only while one
// is registered (followersCTE).
// It runs after sqlLeaveLockTicket and sqlLeaveLockQueue, in the same
// transaction (see Turn.leave for why).
// $1 namespace, $2 resource, $3 ticket, $4 owner, $5 channel.
var sqlTicketLeave = `
WITH d AS (
    DELETE FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4
    RETURNING t.label, t.served_at IS NOT NULL AS served, t.expires_at > pg_catalog.clock_timestamp() AS alive
),
nx AS (
    SELECT s.ticket FROM {{schema}}.tickets s
    WHERE EXISTS (SELECT 1 FROM d) AND s.namespace = $1 AND s.resource = $2 AND s.ticket > $3
      AND s.expires_at > pg_catalog.clock_timestamp()
      AND NOT EXISTS (SELECT 1 FROM {{schema}}.tickets l WHERE l.namespace = $1 AND l.resource = $2
          AND l.ticket < $3 AND l.expires_at > pg_catalog.clock_timestamp())
    ORDER BY s.ticket LIMIT 1
),
dc AS (
    SELECT t.ticket FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket <> $3 AND t.ticket < (SELECT nx.ticket FROM nx)
      AND t.expires_at <= pg_catalog.clock_timestamp()
    FOR UPDATE SKIP LOCKED
),
dead AS (
    DELETE FROM {{schema}}.tickets t USING dc
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = dc.ticket
    RETURNING t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
),
blk AS (
    SELECT t.ticket FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket <> $3 AND t.ticket < (SELECT nx.ticket FROM nx)
      AND NOT EXISTS (SELECT 1 FROM dead WHERE dead.ticket = t.ticket)
),
gl AS (
    SELECT t.ticket FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = (SELECT nx.ticket FROM nx) AND t.served_at IS NULL
      AND t.expires_at > pg_catalog.clock_timestamp() AND NOT EXISTS (SELECT 1 FROM blk)
    FOR UPDATE SKIP LOCKED
),
g AS (
    UPDATE {{schema}}.tickets t SET served_at = pg_catalog.clock_timestamp()
    FROM gl
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = gl.ticket
    RETURNING t.ticket, t.label, t.owner
),
ev AS (
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner, by_ticket)
    SELECT $1, $2, $3, CASE WHEN d.alive THEN CASE WHEN d.served THEN 'completed' ELSE 'cancelled' END
                            ELSE CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END END, d.label, $4, NULL::bigint
    FROM d
    UNION ALL
    SELECT $1, $2, x.ticket, CASE WHEN x.served THEN 'crashed' ELSE 'bumped' END, x.label, x.owner, (SELECT nx.ticket FROM nx)
    FROM dead x
    UNION ALL
    SELECT $1, $2, g.ticket, 'granted', g.label, g.owner, NULL FROM g
    RETURNING 1
),
` + followersCTE(`EXISTS (SELECT 1 FROM d) AND (SELECT pg_catalog.count(*) FROM ev) > 0 AND (SELECT pg_catalog.count(*) FROM g) >= 0`) + `
SELECT d.served, d.alive, coalesce((SELECT nx.ticket FROM nx), 0), EXISTS (SELECT 1 FROM g)
FROM d
LEFT JOIN LATERAL (SELECT pg_catalog.pg_notify($5, 't' || pg_catalog.octet_length($1::text)::text || ':' || $1::text || nx.ticket::text)
    FROM nx) AS w ON true
` + notifyFollowersSQL(`$5`)

// sqlLeaveLockTicket locks the leaving ticket's row, as its DELETE would,
// before the queue's row is locked: a wait for a guard's transaction
// (VerifyTurn) holds no lock that draws or other leaves need.
// $1 namespace, $2 resource, $3 ticket, $4 owner.
const sqlLeaveLockTicket = `
SELECT 1 FROM {{schema}}.tickets t
WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4
FOR UPDATE`

// sqlLeaveLockQueue locks the resource's queue row until the leave
// commits. It conflicts with itself and with a draw's FOR UPDATE: the
// leaves of one resource decide whom to wake one after the other, each
// seeing every earlier leave (and draw) committed.
// $1 namespace, $2 resource.
const sqlLeaveLockQueue = `
SELECT 1 FROM {{schema}}.queues q
WHERE q.namespace = $1 AND q.resource = $2
FOR NO KEY UPDATE`

// sqlQueue lists the live tickets of one resource, lowest first.
// $1 namespace, $2 resource.
const sqlQueue = `
SELECT resource, ticket, label, owner, host, pid, drawn_at, served_at, expires_at
FROM {{schema}}.tickets
WHERE namespace = $1 AND resource = $2 AND expires_at > pg_catalog.clock_timestamp()
ORDER BY ticket`

// sqlQueues lists the live tickets of every resource of a namespace.
// $1 namespace.
const sqlQueues = `
SELECT resource, ticket, label, owner, host, pid, drawn_at, served_at, expires_at
FROM {{schema}}.tickets
WHERE namespace = $1 AND expires_at > pg_catalog.clock_timestamp()
ORDER BY resource, ticket`

// sqlReset removes the dead tickets of a resource, only if it has no live
// one; it reports the live count and how many were removed. It notifies
// followers while one is registered (followersCTE).
// $1 namespace, $2 resource, $3 channel.
var sqlReset = `
WITH live AS (
    SELECT pg_catalog.count(*) AS n FROM {{schema}}.tickets
    WHERE namespace = $1 AND resource = $2 AND expires_at > pg_catalog.clock_timestamp()
),
d AS (
    DELETE FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.expires_at <= pg_catalog.clock_timestamp()
      AND (SELECT n FROM live) = 0
    RETURNING t.ticket, t.label, t.owner, t.served_at IS NOT NULL AS served
),
ev AS (
    INSERT INTO {{schema}}.queue_events (namespace, resource, ticket, event, label, owner)
    SELECT $1, $2, d.ticket, CASE WHEN d.served THEN 'crashed' ELSE 'bumped' END, d.label, d.owner FROM d
    RETURNING 1
),
` + followersCTE(`(SELECT pg_catalog.count(*) FROM ev) > 0`) + `
SELECT (SELECT n FROM live), (SELECT pg_catalog.count(*) FROM d)
FROM (SELECT 1) AS one
` + notifyFollowersSQL(`$3`)

// sqlQueueResources lists the resources of a namespace with any ticket.
// $1 namespace.
const sqlQueueResources = `
SELECT DISTINCT resource FROM {{schema}}.tickets WHERE namespace = $1 ORDER BY resource`

// sqlVerifyTurn checks that a ticket is served and live, and locks its row
// FOR KEY SHARE until the caller's transaction ends: neither its release nor
// its removal as dead (both DELETEs, which lock FOR UPDATE) can commit
// before the caller's guarded writes do, so nobody behind it can be served
// meanwhile. The holder's renewals (FOR NO KEY UPDATE, a non-key update) do
// not conflict with KEY SHARE, so guarded writes back to back never starve
// them (see sqlVerify for the lock table).
// $1 namespace, $2 resource, $3 ticket.
const sqlVerifyTurn = `
SELECT served_at IS NOT NULL AND expires_at > pg_catalog.clock_timestamp()
FROM {{schema}}.tickets
WHERE namespace = $1 AND resource = $2 AND ticket = $3
FOR KEY SHARE`

// sqlQueueEvents reads queue events after an id, oldest first.
// $1 namespace, $2 resources (NULL: all), $3 after id, $4 limit.
const sqlQueueEvents = `
SELECT id, resource, ticket, event, label, owner, coalesce(by_ticket, 0), at
FROM {{schema}}.queue_events
WHERE namespace = $1 AND ($2::text[] IS NULL OR resource = ANY ($2::text[])) AND id > $3
ORDER BY id
LIMIT $4`

// sqlQueueEventsHead is the id of the newest queue event.
const sqlQueueEventsHead = `SELECT coalesce(pg_catalog.max(id), 0) FROM {{schema}}.queue_events`

// sqlQueueFollow registers a follower of namespace $1 for $2 µs from now
// (following_until only ever moves forward), so statements that record the
// namespace's queue events notify (see followersCTE and FollowQueues). It
// never waits for the row while statements recording events hold it FOR
// SHARE (share lockers would keep a waiting update out for as long as they
// overlap): it then registers nothing and returns 0, and the follower
// retries soon. A namespace with no row yet gets one; should a statement
// recording events insert it concurrently, that one is waited for. It
// returns 1 when registered.
// $1 namespace, $2 registration µs.
const sqlQueueFollow = `
WITH lk AS (
    SELECT f.namespace FROM {{schema}}.queue_followers f
    WHERE f.namespace = $1
    FOR NO KEY UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.queue_followers f
    SET following_until = greatest(f.following_until, pg_catalog.clock_timestamp() + $2::bigint * interval '1 microsecond')
    FROM lk WHERE f.namespace = lk.namespace
    RETURNING 1
),
ins AS (
    INSERT INTO {{schema}}.queue_followers AS f (namespace, following_until)
    SELECT $1, pg_catalog.clock_timestamp() + $2::bigint * interval '1 microsecond'
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queue_followers x WHERE x.namespace = $1)
    ON CONFLICT (namespace) DO UPDATE SET following_until = greatest(f.following_until, excluded.following_until)
    RETURNING 1
)
SELECT (SELECT pg_catalog.count(*) FROM up) + (SELECT pg_catalog.count(*) FROM ins)`

type queueSQL struct {
	draw, serve, leave, queue, queues, reset, verify, events, head, resources string
	leaveLockTicket, leaveLockQueue, follow                                   string
}

var queueSQLs sync.Map // quoted schema -> *queueSQL

func (c *Client) qsql() *queueSQL {
	if q, ok := queueSQLs.Load(c.sql.schema); ok {
		return q.(*queueSQL)
	}
	r := strings.NewReplacer("{{schema}}", c.sql.schema, "{{seq}}", seqLiteral(c.sql.schema))
	q := &queueSQL{
		draw: r.Replace(sqlDraw), serve: r.Replace(sqlServe), leave: r.Replace(sqlTicketLeave),
		queue: r.Replace(sqlQueue), queues: r.Replace(sqlQueues), reset: r.Replace(sqlReset),
		verify: r.Replace(sqlVerifyTurn), events: r.Replace(sqlQueueEvents), head: r.Replace(sqlQueueEventsHead),
		resources:       r.Replace(sqlQueueResources),
		leaveLockTicket: r.Replace(sqlLeaveLockTicket), leaveLockQueue: r.Replace(sqlLeaveLockQueue),
		follow: r.Replace(sqlQueueFollow),
	}
	v, _ := queueSQLs.LoadOrStore(c.sql.schema, q)
	return v.(*queueSQL)
}

// Ticket is one live ticket of a queue.
type Ticket struct {
	Ticket    int64  // the ticket number: a fencing token
	Label     string // see WithLabel
	Owner     string // the client that drew it
	Host      string
	PID       int
	DrawnAt   time.Time // database clock
	ServedAt  time.Time // database clock; zero until its client confirmed its turn
	ExpiresAt time.Time // database clock; renewed by its client's heartbeat
}

// QueueStatus is a snapshot of one resource's queue.
type QueueStatus struct {
	Namespace string
	Resource  string
	// Holder is the lowest live ticket: the one whose turn it is (derived,
	// never stored). Its ServedAt is zero during a handover, until its
	// client confirms. Nil when the queue is empty.
	Holder *Ticket
	// Waiting are the other live tickets, in the order they will be served.
	Waiting []Ticket
}

// Turn is a served ticket: the caller's turn on a resource. It is renewed
// in the background until Release, Close, or a loss (see Done), and is safe
// for concurrent use.
type Turn struct {
	c     *Client
	l     *Lease // the ticket's presence: kind kindTicket, key = resource, token = ticket
	label string
	drawn time.Time // local time the ticket was drawn, for the queue-wait metric
	ahead int       // live tickets ahead when drawn, for the observer; -1 when not counted

	relMu  sync.Mutex
	left   bool // the ticket row was given up (Release or Close)
	leftMu sync.Mutex
}

// Ticket returns the turn's ticket number. It is a fencing token from the
// same sequence as lease tokens: pass it to downstream writes and check it
// with VerifyTurn.
func (t *Turn) Ticket() int64 { return t.l.token }

// Label returns the ticket's label.
func (t *Turn) Label() string { return t.label }

// Resource returns the resource the turn is on.
func (t *Turn) Resource() string { return t.l.key }

// Namespace returns the turn's namespace.
func (t *Turn) Namespace() string { return t.l.ns }

// Done returns a channel that is closed when the turn ends: released,
// client closed, or lost. A lost turn's Done closes at its local deadline
// (send time of its last successful renewal + TTL - safety margin), before
// the database could serve anyone behind it.
func (t *Turn) Done() <-chan struct{} { return t.l.done }

// Err returns nil while the turn is held; afterwards ErrReleased, or an
// error matching ErrLeaseLost.
func (t *Turn) Err() error { return t.l.Err() }

// Deadline returns the local time (monotonic clock) until which the holder
// may trust its turn; it moves forward with every renewal.
func (t *Turn) Deadline() time.Time { return t.l.Deadline() }

// Context returns a copy of parent that is cancelled, with the reason as
// its cause, when the turn ends.
func (t *Turn) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return t.l.Context(parent)
}

// Release ends the turn in one statement guarded by owner and ticket,
// records `completed`, and wakes the next live ticket only. It is
// idempotent and works from a defer after the work's context was cancelled
// (a done ctx is replaced by one bounded by Config.ReleaseTimeout).
//
// It returns nil when it released the turn, and an error matching
// ErrLeaseLost when the turn had been lost (its ticket expired: someone
// behind may have been served). When the statement fails the turn ends all
// the same; the ticket then expires within its TTL, and the next ticket is
// served at that expiry.
func (t *Turn) Release(ctx context.Context) error {
	t.relMu.Lock()
	defer t.relMu.Unlock()
	prior := t.l.Err()
	if errors.Is(prior, ErrReleased) {
		return nil // released before: idempotent, like Lease.Release
	}
	if t.hasLeft() {
		return prior
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), t.c.cfg.ReleaseTimeout)
		defer cancel()
	}
	t.c.hb.remove(t.l)
	res, err := t.leave(ctx)
	if err != nil {
		t.l.end(&LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token,
			Reason: "turn release failed; the ticket is no longer renewed and expires within its TTL unless the release committed", Cause: err})
		return err
	}
	if res.found && res.alive {
		if prior == nil {
			t.l.end(ErrReleased)
			return nil
		}
		return prior
	}
	if prior == nil {
		prior = &LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token, Reason: "turn's ticket expired before release",
			Cause: &StaleTokenError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token}}
		t.l.end(prior)
	}
	return prior
}

func (t *Turn) hasLeft() bool {
	t.leftMu.Lock()
	defer t.leftMu.Unlock()
	return t.left
}

type leaveResult struct {
	found, served, alive bool
	next                 int64 // the ticket notified (0: none)
	granted              bool  // next was granted by the leave itself
}

// leave deletes the ticket row once (later calls do nothing).
//
// Whom to wake is decided under the queue row's lock, in one transaction
// of three statements sent as one batch (one round trip; READ COMMITTED
// takes a new snapshot for each statement):
//
//  1. lock our own ticket row (waiting, if need be, for a VerifyTurn
//     transaction, before any other lock is held);
//  2. lock the queue row (FOR NO KEY UPDATE), which serializes leaves of
//     the resource with one another and with draws;
//  3. delete the ticket and wake the next live ticket if none is live
//     below ours (sqlTicketLeave), with a snapshot taken after 2.
//
// A single statement cannot do it: its one snapshot is taken before it
// waits for any lock. Two tickets leaving at once (the holder releases
// while the waiter behind it gives up) then each saw the other's row
// alive: the holder woke the departing waiter, the waiter woke nobody (a
// live ticket was below it), and the live ticket behind both slept until
// the departed ticket's expiry. Under the queue lock, the leave that
// decides second sees the first one's DELETE committed: if the holder
// decides second it sees the waiter gone and wakes the ticket behind; if
// the waiter decides second it sees the holder gone, no live ticket below
// it, and wakes the ticket behind. By induction, with any number of
// concurrent leaves the last to decide sees all the others' rows gone, so
// the next live ticket is always woken, and only it (no herd). A ticket
// drawn meanwhile is either seen by a later decision (its draw committed
// under the same lock first) or sees the leaves committed at its own
// first serving check. Nothing else reads this lock: renewals and serving
// checks never touch the queue row.
func (t *Turn) leave(ctx context.Context) (leaveResult, error) {
	t.leftMu.Lock()
	defer t.leftMu.Unlock()
	if t.left {
		return leaveResult{}, nil
	}
	var r leaveResult
	qs := t.c.qsql()
	b := &pgx.Batch{}
	b.Queue(qs.leaveLockTicket, t.l.ns, t.l.key, t.l.token, t.c.cfg.Owner)
	b.Queue(qs.leaveLockQueue, t.l.ns, t.l.key)
	b.Queue(qs.leave, t.l.ns, t.l.key, t.l.token, t.c.cfg.Owner, t.c.sql.channel)
	br := t.c.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&r.served, &r.alive, &r.next, &r.granted)
	}
	if cerr := br.Close(); err == nil || (errors.Is(err, pgx.ErrNoRows) && cerr != nil) {
		err = cerr
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		t.left = true
		return r, nil
	case err != nil:
		if !transient(err) {
			t.left = true
		}
		return r, t.c.wrapErr(fmt.Sprintf("leave queue %q/%q (ticket %d)", t.l.ns, t.l.key, t.l.token), err)
	}
	t.left, r.found = true, true
	return r, nil
}

// errTicketLost says a waiting ticket died (not renewed in time); Turn
// draws a new one.
var errTicketLost = errors.New("sentinel: waiting ticket lost")

// Turn draws a ticket for resource and blocks until it is served: until
// every ticket drawn before it has been released, cancelled, or has died
// (expired by the database clock, skipped at once). First come, first
// served: no later ticket is ever served before an earlier live one.
//
// While waiting, the ticket is kept alive by the client's heartbeat and
// the call holds no pool connection: it sleeps until the ticket ahead of it
// leaves (a notification names the one ticket that should re-check) or
// until that ticket's expiry, whichever comes first. If the ticket itself
// dies while waiting (the database was unreachable for longer than its
// TTL), Turn draws a new one at the back of the queue.
//
// ctx bounds the wait: when it ends, the ticket is cancelled (`cancelled`)
// and the next one woken, and the error wraps ctx's cause; a draw in flight
// when ctx ends is let finish (for at most a second) so that its ticket is
// known and cancelled too, never left to hold the queue for a TTL. Options:
// WithLabel, WithTTL, WithNamespace.
//
// A turn is not reentrant: a second Turn on the same resource, even from
// the goroutine holding the first, queues behind it. A holder frozen inside
// a VerifyTurn transaction keeps its ticket row locked, and nobody behind
// it is served until that transaction ends; set
// idle_in_transaction_session_timeout on the server.
func (c *Client) Turn(ctx context.Context, resource string, opts ...Option) (*Turn, error) {
	o, err := c.resolveTurn(resource, opts)
	if err != nil {
		return nil, err
	}
	return c.turn(ctx, resource, o)
}

func (c *Client) resolveTurn(resource string, opts []Option) (callOptions, error) {
	o, err := c.resolve(resource, opts)
	if err != nil {
		var inv *InvalidError
		if errors.As(err, &inv) && inv.Field == "key" {
			inv.Field = "resource"
		}
		return o, err
	}
	if o.hardSet || o.wait || o.force || o.codec != nil || o.metadata != nil || o.token != 0 || o.afterSet {
		return o, invalid("option", "WithHardTTL, WithWait, WithForce, WithCodec, WithMetadata, WithToken and WithAfterEvent do not apply here")
	}
	if o.labelSet {
		if len(o.label) > MaxLabelLen || !validText(o.label) {
			return o, invalid("label", "must be at most %d bytes of UTF-8 without NUL, got %d bytes", MaxLabelLen, len(o.label))
		}
	}
	return o, nil
}

func validText(s string) bool {
	return checkName("text", "x"+s, len(s)+1) == nil
}

func (c *Client) turn(ctx context.Context, resource string, o callOptions) (*Turn, error) {
	for {
		t, err := c.draw(ctx, resource, o)
		if err != nil {
			return nil, err
		}
		err = c.waitTurn(ctx, t)
		if err == nil {
			if obs := c.observer(); obs != nil && obs.QueueGranted != nil {
				obs.QueueGranted(QueueGrant{Namespace: o.namespace, Resource: resource, Ticket: t.l.token,
					Wait: time.Since(t.drawn), Ahead: t.ahead})
			}
			return t, nil
		}
		if errors.Is(err, errTicketLost) {
			// Our ticket died while we waited (renewals failed for a
			// TTL); our place is gone. Give the row up if it is still
			// there and queue again at the back.
			c.cfg.Logger.Warn("sentinel: waiting ticket lost; drawing a new one", "namespace", o.namespace,
				"resource", resource, "ticket", t.Ticket())
			c.abandon(ctx, t, ErrLeaseLost)
			if err := c.checkOpen(); err != nil {
				return nil, err
			}
			continue
		}
		c.abandon(ctx, t, err)
		return nil, err
	}
}

// abandon gives a ticket up (cancelled while waiting, or lost).
func (c *Client) abandon(ctx context.Context, t *Turn, why error) {
	c.hb.remove(t.l)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
	defer cancel()
	if _, err := t.leave(rctx); err != nil {
		c.cfg.Logger.Warn("sentinel: giving up a ticket failed; it expires within its TTL", "namespace", t.l.ns,
			"resource", t.l.key, "ticket", t.l.token, "err", err)
		t.l.end(&LostError{Namespace: t.l.ns, Key: t.l.key, Token: t.l.token, Reason: "ticket given up", Cause: why})
		return
	}
	t.l.end(ErrReleased) // its row is gone
}

// draw draws a ticket, riding out an unreachable database until ctx ends.
func (c *Client) draw(ctx context.Context, resource string, o callOptions) (*Turn, error) {
	for {
		if err := c.checkOpen(); err != nil {
			return nil, err
		}
		var (
			ticket, ahead      int64
			drawnAt, expiresAt time.Time
			remaining          time.Duration
		)
		obs := c.observer()
		sent := time.Now()
		// The draw commits on its own: if ctx ended while it ran and its
		// reply were dropped, the ticket would stay in the queue, unknown
		// to us, and hold everyone behind it for a TTL. So the statement
		// may outlive ctx by grantGrace, and a ticket drawn after ctx
		// ended is given back (cancelled) below.
		sctx, scancel := graceCtx(ctx, grantGrace)
		err := c.pool.QueryRow(sctx, c.qsql().draw, o.namespace, resource, o.label, c.cfg.Owner, c.cfg.Host, c.cfg.PID,
			us(o.ttl), c.sql.channel, obs != nil && obs.QueueGranted != nil).Scan(&ticket, &drawnAt, &expiresAt, &remaining, &ahead)
		scancel()
		if errors.Is(err, pgx.ErrNoRows) {
			continue // the queue row was created concurrently: draw again
		}
		if err != nil {
			if transient(err) && ctx.Err() == nil {
				c.cfg.Logger.Warn("sentinel: drawing a ticket: database unreachable; retrying", "resource", resource, "err", err)
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("sentinel: waiting for turn on %q/%q: %w (last error: %w)", o.namespace, resource, context.Cause(ctx), err)
				case <-time.After(c.cfg.WaitRecheck):
				}
				continue
			}
			return nil, c.wrapErr(fmt.Sprintf("draw ticket for %q/%q", o.namespace, resource), err)
		}
		l := c.newLease(kindTicket, o.namespace, resource, ticket, o.ttl)
		l.acquiredAt = drawnAt
		t := &Turn{c: c, l: l, label: o.label, drawn: sent, ahead: int(ahead)}
		tk := ticketKey{c: c, ns: o.namespace, res: resource, ticket: ticket}
		localTickets.Store(tk, l)
		l.onEnd = func(err error) {
			localTickets.Delete(tk)
			wakeBehind(tk, err, l.margin)
			if errors.Is(err, ErrClosed) {
				// Close: give the ticket up now rather than let the
				// queue wait for its expiry.
				rctx, cancel := context.WithTimeout(context.Background(), c.cfg.ReleaseTimeout)
				defer cancel()
				_, _ = t.leave(rctx)
			}
		}
		if !c.hb.add(l, sent, remaining, expiresAt, time.Time{}) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ReleaseTimeout)
			defer cancel()
			_, _ = t.leave(rctx)
			l.end(ErrReleased)
			return nil, ErrClosed
		}
		return t, nil
	}
}

type serveCheck struct {
	alive, served bool
	pred          int64
	predLeft      time.Duration
	predOwner     string
	racing        bool
}

func (c *Client) serve(ctx context.Context, t *Turn) (serveCheck, error) {
	var s serveCheck
	err := c.pool.QueryRow(ctx, c.qsql().serve, t.l.ns, t.l.key, t.l.token, c.cfg.Owner, c.sql.channel).
		Scan(&s.alive, &s.served, &s.pred, &s.predLeft, &s.predOwner, &s.racing)
	if err != nil {
		return s, c.wrapErr(fmt.Sprintf("check turn on %q/%q (ticket %d)", t.l.ns, t.l.key, t.l.token), err)
	}
	return s, nil
}

// waitTurn waits until t's ticket is served. It returns errTicketLost when
// the ticket died, and ctx's cause when ctx ends.
func (c *Client) waitTurn(ctx context.Context, t *Turn) error {
	key := strconv.FormatInt(t.l.token, 10)
	wake, listening := c.ln.subscribe(ctx, notifyTurn, t.l.ns, key)
	defer c.ln.unsubscribe(notifyTurn, t.l.ns, key, wake)
	var watching ticketKey // the local ticket ahead we are registered behind
	defer unwatch(&watching, wake)
	stop := func() error {
		return fmt.Errorf("sentinel: waiting for turn on %q/%q (ticket %d): %w", t.l.ns, t.l.key, t.l.token, context.Cause(ctx))
	}
	for {
		if err := t.l.Err(); err != nil {
			if errors.Is(err, ErrClosed) {
				return ErrClosed
			}
			return errTicketLost
		}
		if ctx.Err() != nil {
			return stop()
		}
		sent := time.Now()
		s, err := c.serve(ctx, t)
		var delay time.Duration
		switch {
		case err != nil && ctx.Err() != nil:
			return stop()
		case err != nil && transient(err):
			c.cfg.Logger.Warn("sentinel: waiting for turn: database unreachable; retrying", "resource", t.l.key, "err", err)
			delay = c.cfg.WaitRecheck
		case err != nil:
			return err
		case !s.alive:
			return errTicketLost
		case s.served:
			if t.l.Err() != nil {
				return errTicketLost // served, but no longer trusted locally
			}
			return nil
		case s.racing:
			delay = 5 * time.Millisecond
		case s.pred != 0 && c.watchLocal(t, s.pred, s.predOwner, wake, &watching):
			// The ticket ahead is this client's own and alive: it cannot
			// expire unseen (its local deadline comes first, and its end
			// wakes us; see wakeBehind). Only a slow safety re-check.
			delay = c.safetyRecheck(t.l.ttl)
		case s.pred != 0:
			delay = time.Until(sent.Add(s.predLeft)) + time.Millisecond
		default:
			delay = 5 * time.Millisecond
		}
		if !listening {
			delay = min(delay, c.cfg.WaitRecheck)
		}
		delay = max(delay, time.Millisecond)
		timer := time.NewTimer(delay)
		select {
		case <-wake:
		case <-timer.C:
		case <-t.l.done:
		case <-ctx.Done():
		}
		timer.Stop()
		listening = c.ln.listening()
	}
}

// ticketKey names a ticket drawn by a client of this process.
type ticketKey struct {
	c       *Client
	ns, res string
	ticket  int64
}

var (
	// localTickets holds the live tickets of this process's clients.
	localTickets sync.Map // ticketKey -> *Lease
	// behind maps a local ticket to the wake channels of the local
	// waiters directly behind it.
	behindMu sync.Mutex
	behind   = map[ticketKey][]chan struct{}{}
)

// watchLocal registers wake behind the ticket ahead (pred) when that ticket
// is this client's own and alive, and reports whether it did. A client's
// waiters then need no timer for one another: the client renews all of its
// tickets in one statement, and a ticket that ends here (released,
// cancelled, lost) wakes the waiter behind it (wakeBehind). Without this,
// many waiters of one client would all re-check at once, at the expiry of
// tickets renewed by the same heartbeat.
func (c *Client) watchLocal(t *Turn, pred int64, predOwner string, wake chan struct{}, watching *ticketKey) bool {
	unwatch(watching, wake)
	if predOwner != c.cfg.Owner {
		return false
	}
	k := ticketKey{c: c, ns: t.l.ns, res: t.l.key, ticket: pred}
	behindMu.Lock()
	behind[k] = append(behind[k], wake)
	behindMu.Unlock()
	*watching = k
	// Registered first, checked second: an end between the two still
	// finds the registration.
	if v, ok := localTickets.Load(k); ok && v.(*Lease).Err() == nil {
		return true
	}
	unwatch(watching, wake)
	return false
}

func unwatch(watching *ticketKey, wake chan struct{}) {
	if watching.c == nil {
		return
	}
	behindMu.Lock()
	list := behind[*watching]
	for i, ch := range list {
		if ch == wake {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(behind, *watching)
	} else {
		behind[*watching] = list
	}
	behindMu.Unlock()
	*watching = ticketKey{}
}

// wakeBehind wakes the local waiters behind a ticket that ended: at once
// when it was given up (its row is gone), or once its row has expired on
// the database clock when it was lost (its local deadline comes a safety
// margin before that).
func wakeBehind(k ticketKey, why error, margin time.Duration) {
	behindMu.Lock()
	list := slices.Clone(behind[k])
	behindMu.Unlock()
	if len(list) == 0 {
		return
	}
	poke := func() {
		for _, ch := range list {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if errors.Is(why, ErrReleased) || errors.Is(why, ErrClosed) {
		poke()
		return
	}
	time.AfterFunc(2*margin+time.Millisecond, poke)
}

// safetyRecheck is how long a waiter behind one of its own client's
// live tickets sleeps without news: ten TTLs (or WaitRecheck periods),
// jittered so that many waiters of one client spread out. It is a safety
// net only: that ticket's end wakes the waiter (wakeBehind), and it cannot
// expire unseen, because its local deadline comes first.
func (c *Client) safetyRecheck(ttl time.Duration) time.Duration {
	d := 10 * max(ttl, c.cfg.WaitRecheck)
	return d + rand.N(d/2)
}

// VerifyTurn checks, inside the caller's own transaction, that ticket is
// the served, live ticket of resource, and returns a *StaleTokenError
// (matching ErrStaleToken) otherwise. It locks the ticket row FOR KEY SHARE
// until the transaction ends, so the holder's guarded writes commit before
// anyone behind it can be served, while the turn's own renewals go on:
//
//	tx, _ := pool.Begin(ctx)
//	if err := client.VerifyTurn(ctx, tx, "printer", turn.Ticket()); err != nil {
//		tx.Rollback(ctx) // the turn is over: write nothing
//		return err
//	}
//	tx.Exec(ctx, "UPDATE ...")
//	tx.Commit(ctx)
//
// Options: WithNamespace.
func (c *Client) VerifyTurn(ctx context.Context, q Querier, resource string, ticket int64, opts ...Option) error {
	if q == nil {
		return invalid("querier", "must not be nil")
	}
	o, err := c.resolveTurn(resource, opts)
	if err != nil {
		return err
	}
	if ticket <= 0 {
		return invalid("ticket", "must be positive, got %d", ticket)
	}
	var ok bool
	err = q.QueryRow(ctx, c.qsql().verify, o.namespace, resource, ticket).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !ok) {
		return c.fencingRefused(ctx, &StaleTokenError{Namespace: o.namespace, Key: resource, Token: ticket})
	}
	if err != nil {
		return c.wrapErr(fmt.Sprintf("verify turn %q/%q", o.namespace, resource), err)
	}
	return nil
}

func scanTickets(rows pgx.Rows) (map[string][]Ticket, []string, error) {
	defer rows.Close()
	byRes := map[string][]Ticket{}
	var order []string
	for rows.Next() {
		var (
			res    string
			t      Ticket
			served *time.Time
		)
		if err := rows.Scan(&res, &t.Ticket, &t.Label, &t.Owner, &t.Host, &t.PID, &t.DrawnAt, &served, &t.ExpiresAt); err != nil {
			return nil, nil, err
		}
		if served != nil {
			t.ServedAt = *served
		}
		if _, ok := byRes[res]; !ok {
			order = append(order, res)
		}
		byRes[res] = append(byRes[res], t)
	}
	return byRes, order, rows.Err()
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
// Options: WithNamespace.
func (c *Client) Queue(ctx context.Context, resource string, opts ...Option) (*QueueStatus, error) {
	o, err := c.resolveTurn(resource, opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().queue, o.namespace, resource)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read queue %q/%q", o.namespace, resource), err)
	}
	byRes, _, err := scanTickets(rows)
	if err != nil {
		return nil, c.wrapErr(fmt.Sprintf("read queue %q/%q", o.namespace, resource), err)
	}
	q := queueStatus(o.namespace, resource, byRes[resource])
	return &q, nil
}

// Queues returns every queue of the namespace that has a live ticket,
// sorted by resource. Options: WithNamespace.
func (c *Client) Queues(ctx context.Context, opts ...Option) ([]QueueStatus, error) {
	o, err := c.resolveNamespace(opts)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, c.qsql().queues, o.namespace)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	byRes, order, err := scanTickets(rows)
	if err != nil {
		return nil, c.wrapErr("read queues", err)
	}
	out := make([]QueueStatus, 0, len(order))
	for _, r := range order {
		out = append(out, queueStatus(o.namespace, r, byRes[r]))
	}
	return out, nil
}

// resolveNamespace resolves options for a call on a whole namespace.
func (c *Client) resolveNamespace(opts []Option) (callOptions, error) {
	o, err := c.resolveTurn("-", opts)
	if err != nil {
		return o, err
	}
	if o.ttlSet || o.labelSet || o.afterSet {
		return o, invalid("option", "only WithNamespace applies here")
	}
	return o, nil
}

// ResetQueue removes the dead tickets of resource (expired by the database
// clock, not yet skipped) and returns how many it removed, recording each
// as `crashed` or `bumped`. A queue with a live holder or waiter is not
// touched: it returns a *QueueBusyError (ErrQueueBusy) and removes nothing.
// Options: WithNamespace.
func (c *Client) ResetQueue(ctx context.Context, resource string, opts ...Option) (int, error) {
	o, err := c.resolveTurn(resource, opts)
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
// alone. Options: WithNamespace.
func (c *Client) ResetQueues(ctx context.Context, opts ...Option) (map[string]int, error) {
	o, err := c.resolveNamespace(opts)
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
	By        int64  // for crashed/bumped: the ticket that skipped it (0: ResetQueue or the owner)
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
// Options: WithNamespace.
func (c *Client) QueueHistory(ctx context.Context, resource string, after int64, limit int, opts ...Option) ([]QueueEvent, error) {
	o, err := c.resolveTurn(resource, opts)
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
	return max(30*time.Second, 4*recheck)
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
// max(30s, 4 × WaitRecheck).
func (c *Client) FollowQueues(ctx context.Context, resources []string, fn func(QueueEvent) error, opts ...Option) error {
	if fn == nil {
		return invalid("fn", "must not be nil")
	}
	var from callOptions // WithAfterEvent, which resolveTurn refuses
	for _, opt := range opts {
		opt(&from)
	}
	o, err := c.resolveTurn("-", append(opts[:len(opts):len(opts)], func(o *callOptions) { o.afterSet = false }))
	switch {
	case err != nil:
		return err
	case o.ttlSet || o.labelSet:
		return invalid("option", "only WithNamespace and WithAfterEvent apply to FollowQueues")
	case from.after < 0:
		return invalid("WithAfterEvent", "must not be negative, got %d", from.after)
	}
	o.after, o.afterSet = from.after, from.afterSet
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

// TurnSet is a turn on each of several resources, taken in sorted order
// (see Client.TurnAll).
type TurnSet struct {
	turns []*Turn
	done  chan struct{}
	once  sync.Once
}

// TurnAll takes a turn on every resource (duplicates are taken once), one
// after the other in sorted (byte) order, so that callers that use TurnAll
// on overlapping sets never deadlock. If any Turn fails (ctx ends, bad
// input, client closed) every turn already taken is released and the error
// returned. It is the console's `lock`. Options: as for Turn; they apply to
// every ticket.
func (c *Client) TurnAll(ctx context.Context, resources []string, opts ...Option) (*TurnSet, error) {
	if len(resources) == 0 {
		return nil, invalid("resources", "must not be empty")
	}
	sorted := slices.Clone(resources)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var o callOptions
	for _, r := range sorted {
		var err error
		if o, err = c.resolveTurn(r, opts); err != nil {
			return nil, err
		}
	}
	s := &TurnSet{done: make(chan struct{})}
	for _, r := range sorted {
		t, err := c.turn(ctx, r, o)
		if err != nil {
			_ = s.Release(ctx)
			return nil, err
		}
		s.turns = append(s.turns, t)
	}
	for _, t := range s.turns {
		go func() {
			<-t.Done()
			s.once.Do(func() { close(s.done) })
		}()
	}
	return s, nil
}

// Turns returns the turns, in the order they were taken (sorted by resource).
func (s *TurnSet) Turns() []*Turn { return slices.Clone(s.turns) }

// Done is closed when any of the turns ends.
func (s *TurnSet) Done() <-chan struct{} { return s.done }

// Err returns the first turn's error, in resource order (nil while all are
// held).
func (s *TurnSet) Err() error {
	for _, t := range s.turns {
		if err := t.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Context returns a copy of parent cancelled when any of the turns ends.
func (s *TurnSet) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-s.done:
			cancel(s.Err())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Release releases every turn, in reverse order, and returns the first
// error (see Turn.Release).
func (s *TurnSet) Release(ctx context.Context) error {
	var first error
	for i := len(s.turns) - 1; i >= 0; i-- {
		if err := s.turns[i].Release(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
