package sentinel

// This file: the queue's protocol statements (draw, serve, leave, verify, reset, the views' reads, follower registration) and queueSQL, their rendering per schema.

import (
	"strings"
	"sync"
)

// The protocol of the fair queue lock, its statements, and their rendering
// for a client's schema (queueSQL). Why no later ticket is ever served
// before an earlier live one is argued at the top of queue.go.
//
// A ticket is a row of tickets; the holder is derived, never stored: it is
// the lowest live ticket of its resource. Each arrow below is one
// statement; the event it records in queue_events is in brackets.
//
//	Turn ── sqlDraw [assigned] ──▶ waiting (served_at NULL)
//	                                  │
//	                                  │ [granted], once no live ticket is below it:
//	                                  │   by its own draw when none is (queue_draw,
//	                                  │   migration 020), by the previous holder's
//	                                  │   leave (the handover in sqlTicketLeave), or
//	                                  │   by its own serving check (sqlServe)
//	                                  ▼
//	                               served (served_at set)
//
//	  waiting ── left by its owner (sqlTicketLeave: Turn gave up waiting, Close) ──▶ gone [cancelled]
//	  either  ── left by its owner after its draw returned without it            ──▶ gone [cancelled]
//	             (cut off as ctx ended: found by its mark, sqlDrawnTickets)
//	  served  ── given back before Turn returned it (ctx ended as it was granted) ──▶ gone [cancelled]
//	  served  ── left by its holder (sqlTicketLeave: Turn.Release, Close)        ──▶ gone [completed]
//	  waiting ── expired, then removed                                           ──▶ gone [bumped]
//	  served  ── expired, then removed                                           ──▶ gone [crashed]
//
// While live (expires_at after the database clock) a ticket, waiting or
// served, is renewed by its client's heartbeat (kindTicket, see
// renewKinds in queries.go); a renewal never revives a ticket whose expiry
// passed. An expired ticket is removed by the serving check of a ticket
// behind it (sqlServe, recording by_ticket), by the draw of a ticket behind
// it that finds no live ticket ahead (queue_draw, recording by_ticket), by
// a leave that hands over past it (sqlTicketLeave, recording by_ticket),
// by its owner's own leave, by ResetQueue (sqlReset), or, expired for an
// hour at least, by Prune (sqlPrune).
//
// The leave runs as one transaction of three statements: sqlLeaveLockTicket,
// sqlLeaveLockQueue, then sqlTicketLeave (see Turn.leave). VerifyTurn
// (sqlVerifyTurn) checks that a ticket is served and live and holds it
// FOR KEY SHARE until the caller's transaction ends. The tickets of a draw
// that returned without them are found by the draw's mark
// (sqlDrawnTickets, under the queue's lock) and left the same way. Followers register
// (sqlQueueFollow) so that the statements recording events notify them
// (followersCTE); the views read sqlQueue, sqlQueues, sqlQueueEvents,
// sqlQueueEventsHead and sqlQueueResources.

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
// (creating it on the first draw) and calls queue_draw (migration 020)
// under that lock, which mints the ticket and inserts it, records
// `assigned`, counts the live tickets ahead when asked, and, with
// snapshots taken under the lock (the statement's was taken before it
// waited for the lock), reads the live ticket directly ahead, or, when
// there is none, serves the new ticket as its serving check would (see the
// migration). The row is locked, never updated: drawers wait on one row
// version, in the order they asked (PostgreSQL's tuple lock queue), rather
// than retrying against a chain of new versions where a newcomer could
// overtake them. The time left is computed at the end, so a wait for the
// lock only shortens what the client trusts.
//
// Every attempt of one draw carries the same mark ($11, random per draw,
// Client.draw). An attempt sent again after the connection dropped ($12:
// the earlier one may have committed unheard) first adopts the live ticket
// of this owner that carries the mark, rather than drawing a second one
// that would queue behind the first, which nobody renews or gives up.
//
// A draw that served its ticket commits as every grant does, durably, so
// that its holder is told only once the grant is on disk: a lone Turn is
// one statement. Any other draw commits without waiting for its WAL to
// reach disk (synchronous_commit off, for this transaction only): it
// holds the queue row's lock until it commits, and every leave of the resource waits for
// that lock, so a draw that waited for its flush delayed the next handover
// by a disk flush. Nothing a holder relies on is made non-durable by it:
//
//   - a drawn ticket grants nothing. It is trusted only once served, and
//     serving is a durable commit: the draw's own when it served the
//     ticket, else one made after the draw committed: the leave that
//     grants it (sqlTicketLeave) or its own serving check (sqlServe,
//     which writes served_at). A commit flushes the WAL up to
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
// It returns the live ticket directly ahead (0 when none): a ticket with
// a live ticket ahead is granted or woken by a later leave, so its waiter
// needs no serving check before it sleeps (Client.waitTurn). A ticket
// with none ahead that the draw could not serve (a dead ticket below it
// locked elsewhere) makes its serving check, which waits for that row.
//
// queue_draw takes the queue row's columns (q's), not $1 and $2, so that
// the planner runs it for q's row, after the lock, and never without one.
//
// It returns no row when the queue row was created by a concurrent draw
// after this statement's snapshot (only on a resource's first draws): the
// caller runs it again. It notifies followers only while one is registered
// (followersCTE), after the ticket is inserted, so the followers' row is
// the last it locks.
// $1 namespace, $2 resource, $3 label, $4 owner, $5 host, $6 pid, $7 ttl µs,
// $8 channel, $9 count the live tickets ahead (the queue's depth, for the
// observer, counted under the queue's lock; false: not counted, -1), $10
// the channel of the drawer's process (listenHub.direct; empty: none),
// where the leave ahead of the ticket wakes it (sqlTicketLeaveWake), $11
// the draw's mark, $12 whether an earlier attempt of this draw may have
// committed. It returns the ticket, when it was drawn and expires, its
// time left, the count, then the ticket ahead, its owner and its time
// left, and whether the ticket is served (by this draw, or, adopted, by
// the leave ahead).
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
    SELECT a.* FROM q CROSS JOIN LATERAL {{schema}}.queue_draw(q.namespace, q.resource, $3, $4, $5, $6, $7::bigint, nullif($10::text, ''),
        $11::bigint, $12::boolean, $9::boolean, {{seq}}) AS a
),
` + followersCTE(`(SELECT pg_catalog.count(*) FROM t) > 0`) + `
SELECT t.ticket, t.drawn_at, t.expires_at, t.expires_at - pg_catalog.clock_timestamp(), t.counted,
    coalesce(t.ahead, 0), coalesce(t.ahead_owner, ''), coalesce(t.ahead_left, interval '0'), t.served
FROM t
CROSS JOIN LATERAL (SELECT pg_catalog.set_config('synchronous_commit',
    CASE WHEN t.served THEN pg_catalog.current_setting('synchronous_commit') ELSE 'off' END, true)) AS async
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
// The ticket is named by its number, owner and drawn_at ($6): a draw that
// serves nothing commits without waiting for its flush, so a crash can
// lose it with the sequence's advance that minted its number, which is
// then drawn again, by another Turn of the same client as like as not;
// drawn_at (clock_timestamp(), in µs) tells the two apart.
// $1 namespace, $2 resource, $3 ticket, $4 owner, $5 channel, $6 drawn_at.
var sqlServe = `
WITH me AS (
    SELECT t.label, t.served_at FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4 AND t.drawn_at = $6
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
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4 AND t.drawn_at = $6
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
// when it had expired; `cancelled` too for a served ticket whose Turn never
// returned it, $7 false: its grant came as the caller's ctx ended, and
// nobody took the turn) and, when no live ticket remains below it, hands the
// turn over in the same statement: the next live ticket (nx) is granted
// (served_at set, `granted` recorded) and only that ticket is woken. The
// wake-up is not sent by this statement (see wake.go): the leave's commit
// waits for its flush without holding the database's notify lock, and
// sqlTicketLeaveWake, in the same round trip, wakes the ticket right after
// it. A grant is announced as 's' (served: its waiter returns on it, with
// no statement of its own) and as 't' (a re-check, for waiters of clients
// before 's'); a ticket that could not be granted gets 't' only. A
// handover costs this one commit and one wake-up.
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
// meanwhile) nx is still woken: its own serving check (sqlServe) then decides, as before.
// The targeted wake-up goes only to a registered waiter: the next live
// ticket is a Turn that waits (or is about to check, after subscribing, and
// then sees this leave committed), kept alive by its client's heartbeat;
// when there is none nothing is sent. Followers are notified only while one
// is registered (followersCTE).
// It runs after sqlLeaveLockTicket and sqlLeaveLockQueue, in the same
// transaction (see Turn.leave for why).
// $1 namespace, $2 resource, $3 ticket, $4 owner, $5 channel, $6 drawn_at
// (see sqlServe), $7 whether Turn returned the turn to its caller.
var sqlTicketLeave = `
WITH d AS (
    DELETE FROM {{schema}}.tickets t
    WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4 AND t.drawn_at = $6
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
    SELECT $1, $2, $3, CASE WHEN d.alive THEN CASE WHEN d.served AND $7::boolean THEN 'completed' ELSE 'cancelled' END
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
` + notifyFollowersSQL(`$5`)

// sqlTicketLeaveWake wakes the ticket a leave of ticket $4 made next, once
// the leave committed, in a transaction of its own that does not wait for
// its WAL flush (see wake.go); it is sent in the leave's round trip
// (Turn.leave). It reads what the leave committed: the lowest live ticket
// above $4, when no live ticket is below $4 (sqlTicketLeave's nx). A
// served one (the leave granted it) is told 's' (served: its waiter
// returns on it) and 't'; an unserved one 't' (re-check). 's' is only
// ever sent for a ticket whose served_at is committed, so it is a fact,
// not a hint; a 't' for a change since is a spare re-check. They go to
// the channel of the ticket's process (recorded by its draw, migration
// 14), or to the schema's, $1, for a ticket drawn without one (by a client
// older than version 14, or one not listening yet).
// $1 channel, $2 namespace, $3 resource, $4 the ticket that left.
var sqlTicketLeaveWake = `
SELECT pg_catalog.pg_notify(w.c, w.p)
FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, (
    SELECT pg_catalog.unnest(CASE WHEN nx.served THEN ARRAY['s' || nx.id, 't' || nx.id] ELSE ARRAY['t' || nx.id] END) AS p,
        coalesce(nx.channel, $1::text) AS c
    FROM (
        SELECT pg_catalog.octet_length($2::text)::text || ':' || $2::text || t.ticket::text AS id, t.served_at IS NOT NULL AS served,
            t.channel
        FROM {{schema}}.tickets t
        WHERE t.namespace = $2 AND t.resource = $3 AND t.ticket > $4 AND t.expires_at > pg_catalog.clock_timestamp()
          AND NOT EXISTS (SELECT 1 FROM {{schema}}.tickets l WHERE l.namespace = $2 AND l.resource = $3
              AND l.ticket < $4 AND l.expires_at > pg_catalog.clock_timestamp())
        ORDER BY t.ticket LIMIT 1
    ) AS nx
) AS w`

// sqlTicketGivenUp reads whether ticket $3's own leave removed it while it
// was live: sqlTicketLeave records that as `completed` or `cancelled`
// (with no by_ticket), in the transaction that deletes the row; a ticket
// removed as expired, by anyone, is recorded `crashed` or `bumped`. Ticket
// numbers are never reused. Turn.Release reads it when a retry after a
// failed leave finds the row gone: the failed leave committed, its reply
// lost. A record pruned since (Prune) reads as not given up.
// $1 namespace, $2 resource, $3 ticket, $4 owner.
const sqlTicketGivenUp = `
SELECT EXISTS (SELECT 1 FROM {{schema}}.queue_events e
               WHERE e.namespace = $1 AND e.resource = $2 AND e.ticket = $3 AND e.owner = $4
                 AND e.by_ticket IS NULL AND e.event IN ('completed', 'cancelled'))`

// sqlLeaveLockTicket locks the leaving ticket's row, as its DELETE would,
// before the queue's row is locked: a wait for a guard's transaction
// (VerifyTurn) holds no lock that draws or other leaves need.
// $1 namespace, $2 resource, $3 ticket, $4 owner, $5 drawn_at (see sqlServe).
const sqlLeaveLockTicket = `
SELECT 1 FROM {{schema}}.tickets t
WHERE t.namespace = $1 AND t.resource = $2 AND t.ticket = $3 AND t.owner = $4 AND t.drawn_at = $5
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

// sqlDrawnTickets reads the live tickets of owner $3 that carry draw mark
// $4 (tickets.draw_nonce, migration 020) on namespace $1, resource $2: the
// tickets of a draw that ended unheard, to give back (Client.leaveDrawn).
// Owner, namespace, resource and mark together: no other owner's ticket,
// nor another draw's, is ever read. It runs after sqlLeaveLockQueue, in the
// same transaction, so a draw that held the queue's lock (or waited for it
// ahead) has committed or failed by then. It locks nothing: the leave of
// each ticket (Turn.leave) is guarded by its number, owner and drawn_at.
// $1 namespace, $2 resource, $3 owner, $4 the draw's mark.
const sqlDrawnTickets = `
SELECT t.ticket, t.drawn_at FROM {{schema}}.tickets t
WHERE t.namespace = $1 AND t.resource = $2 AND t.owner = $3 AND t.draw_nonce = $4
  AND t.expires_at > pg_catalog.clock_timestamp()
ORDER BY t.ticket`

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

// sqlAllQueues lists the live tickets of every resource of every
// namespace.
const sqlAllQueues = `
SELECT namespace, resource, ticket, label, owner, host, pid, drawn_at, served_at, expires_at
FROM {{schema}}.tickets
WHERE expires_at > pg_catalog.clock_timestamp()
ORDER BY namespace, resource, ticket`

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
	draw, serve, leave, queue, queues, allQueues, reset, verify, events, head, resources string
	leaveLockTicket, leaveLockQueue, leaveWake, follow, givenUp, drawnTickets            string
}

var queueSQLs sync.Map // quoted schema -> *queueSQL

func (c *Client) qsql() *queueSQL {
	if q, ok := queueSQLs.Load(c.sql.schema); ok {
		return q.(*queueSQL)
	}
	r := strings.NewReplacer("{{schema}}", c.sql.schema, "{{seq}}", seqLiteral(c.sql.schema))
	q := &queueSQL{
		draw: r.Replace(sqlDraw), serve: r.Replace(sqlServe), leave: r.Replace(sqlTicketLeave),
		queue: r.Replace(sqlQueue), queues: r.Replace(sqlQueues), allQueues: r.Replace(sqlAllQueues), reset: r.Replace(sqlReset),
		verify: r.Replace(sqlVerifyTurn), events: r.Replace(sqlQueueEvents), head: r.Replace(sqlQueueEventsHead),
		resources:       r.Replace(sqlQueueResources),
		leaveLockTicket: r.Replace(sqlLeaveLockTicket), leaveLockQueue: r.Replace(sqlLeaveLockQueue),
		leaveWake: r.Replace(sqlTicketLeaveWake), follow: r.Replace(sqlQueueFollow),
		givenUp: r.Replace(sqlTicketGivenUp), drawnTickets: r.Replace(sqlDrawnTickets),
	}
	v, _ := queueSQLs.LoadOrStore(c.sql.schema, q)
	return v.(*queueSQL)
}
