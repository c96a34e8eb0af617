package sentinel

// This file: the election protocol: its statements (campaign, resign with its handover to a named successor, the wait registration, join/leave, leader, members, verify term), their per-schema rendering (electionSQL) and the notification kinds.

// Leader election, the protocol.
//
// Leadership of a group is a lease on the group's row in the leaders table
// (a table of its own: no group name can collide with a lease key), and
// the term is that grant's fencing token, minted by the statement that
// writes the grant. Every transition is one guarded statement:
//
//	            campaign wins: the row is absent or expired by the database
//	            clock (one statement: lock it SKIP LOCKED, mint term T, write;
//	            an expired row found locked: wait for it, bounded, and again)
//	┌──────────┐ ─────────────────────────────────────────────▶ ┌─────────────┐ ──┐ heartbeat renews
//	│ follower │                                                 │ leader (T)  │   │ (owner + T +
//	└──────────┘ ◀───────────────────────────────────────────── └─────────────┘ ◀─┘ unexpired guard)
//	   │    ▲     OnElected's ctx is cancelled; once OnElected returned:
//	   │    │     release (owner + T guard, NOTIFY) on Resign, Run's ctx,
//	   │    │     Client.Close or a panic; on a loss (local deadline
//	   │    │     passed) the release is still tried until the row's
//	   └────┘     expiry, else the row expires by itself
//	   sleeps until the leader's release (NOTIFY, a hint) or its expiry as
//	   the database computed it, then campaigns: no fixed poll interval
//
// A release hands the term over in the same statement when a follower
// registered as the successor (sqlElectionWait, then sqlResign):
//
//	┌──────────┐ registers as waiting (waiting_until); one that may lead
//	│ follower │ names itself the successor S (next_*; the last to register)
//	└──────────┘
//	┌─────────────┐ release, S's member row live, the row not locked:  ┌─────────────┐
//	│ leader (T)  │ ─────────────────────────────────────────────────▶ │ S leads (T')│
//	└─────────────┘ mint T', term_member = S's member token;            └─────────────┘
//	       │        NOTIFY 'h' (to S, by its token, carrying the       S leads from the
//	       │        grant), then 'g'                                   wake-up, or reads
//	       ▼        otherwise: the row expires now; NOTIFY 'g' only     its grant with its
//	   no leader    while a follower is registered as waiting          next campaign
//
// The statements: sqlCampaign (campaign, and a successor's read of its
// grant), the heartbeat's renewal (renewKinds in queries.go: kindLeader,
// kindMember), sqlResign (release, with the handover), sqlElectionWait (a
// follower's registration), sqlJoin and sqlLeave (member rows), sqlLeader
// and sqlMembers (the reads), sqlVerifyTerm (a leader's guarded write).
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
	"strings"
	"sync"
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
// The elector takes such a read only for a term newer than the last one it
// led (Elector.campaign): a term it led and released, whose release
// failed, still names it there.
//
// A campaign that writes no grant (it reads the leader, or a grant made by
// a resignation) commits without waiting for its WAL flush (sc:
// synchronous_commit off for this transaction only; a grant keeps the
// session's setting): its only write is the member's last_poll, which
// nobody relies on, and a grant it reads was made durable by the
// resignation's own commit before anyone could see it.
//
// Locks: a takeover locks the row FOR UPDATE (SKIP LOCKED: a locked row is
// reported held, never waited for; Elector.campaign then waits for that
// lock, bounded, with sqlCampaignLock, and sends this statement again in
// the same transaction), which conflicts with VerifyTerm's FOR
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
        term_member = NULL, term_channel = NULL
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

// sqlCampaignLock waits, inside the server, for the lock on the group's
// row while the row is expired: the campaign's lk skips a locked row
// (SKIP LOCKED), and a row locked as the previous term ended is held by a
// transaction that is committing (the resignation, the resigner's
// registration as waiting on its released row, a renewal) whose end
// nothing marks: the follower backed off 10 ms, doubling, after every
// such skip (issue 30: most of the handover's tail). Elector.campaign
// sends it, with lock_timeout set for its transaction only
// (campaignLockWait, a few hundred ms at most), and sqlCampaign after it
// in the same transaction (one round trip), only when sqlCampaign found
// the row expired and did not take it. Once the holder committed,
// FOR UPDATE re-checks the expiry on the row's newest version (read
// committed's re-check): a row the holder handed over or renewed is not
// locked, and the sqlCampaign after it reads the new leader (a snapshot of
// its own, taken after the wait); a row still expired stays locked by this
// transaction, which sqlCampaign's lk does not skip (its own lock), and the
// campaign takes it. A wait that times out (a guarded transaction of the
// old term holds the row, FOR KEY SHARE) fails the transaction, which rolls
// back whole, and the follower falls back to its backoff: the wait holds
// one pool connection, for lock_timeout at most.
// $1 namespace, $2 election.
const sqlCampaignLock = `
SELECT 1 FROM {{schema}}.leaders t
WHERE t.namespace = $1 AND t.election = $2 AND t.expires_at <= pg_catalog.clock_timestamp()
FOR UPDATE`

// sqlResign ends a term, guarded by owner, term and expiry, and hands it
// over in the same statement when a successor is named (sqlElectionWait):
//
//   - lk locks the group's row FOR UPDATE, SKIP LOCKED, when the term is
//     live and a successor other than this elector ($5, its member token)
//     is registered (waiting_until) and its member row is live on the
//     database clock (a stopped elector deletes it; a dead one stops
//     renewing it). FOR UPDATE conflicts with VerifyTerm's FOR KEY SHARE,
//     as a campaign's takeover does: no new term begins while a guarded
//     transaction of the old one is open (the row is skipped then, and
//     the resignation only ends the term, as below).
//   - tr writes the next term for the successor: a term minted here, its
//     expiry counted from clock_timestamp() with the successor's TTL,
//     term_member naming it; the successor is notified by its member token
//     (kind 'h', carrying the grant: see sqlResignWake), and leads from it
//     or, when it cannot trust it, reads its grant (sqlCampaign); the
//     group's other followers are woken too (kind 'g', after it), so they
//     see the new leader at once.
//   - otherwise d ends the term (expires it now) and wakes the group's
//     followers, only while one is registered as waiting.
//
// It sends no wake-up itself: the resignation commits durably without the
// database's notify lock, and sqlResignWake, sent in the same round trip,
// wakes the successor and the followers right after the commit, in a
// transaction of its own (wake.go).
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
// $1 namespace, $2 election, $3 owner, $4 term, $5 this elector's member
// token (0: none).
const sqlResign = `
WITH lk AS (
    SELECT t.namespace, t.election, t.next_owner, t.next_member, t.next_host, t.next_pid, t.next_app_version, t.next_ttl_us,
        t.next_channel
    FROM {{schema}}.leaders t
    WHERE t.namespace = $1 AND t.election = $2 AND t.owner = $3 AND t.term = $4
      AND t.expires_at > pg_catalog.clock_timestamp()
      AND t.next_member IS NOT NULL AND t.next_member <> $5::bigint AND t.next_ttl_us > 0
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
        term_member = lk.next_member, term_channel = lk.next_channel,
        next_owner = NULL, next_member = NULL, next_host = NULL, next_pid = NULL, next_app_version = NULL, next_ttl_us = NULL,
        next_channel = NULL
    FROM lk WHERE t.namespace = lk.namespace AND t.election = lk.election
    RETURNING t.term
),
d AS (
    UPDATE {{schema}}.leaders t SET expires_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = $1 AND t.election = $2 AND t.owner = $3 AND t.term = $4
      AND t.expires_at > pg_catalog.clock_timestamp() AND NOT EXISTS (SELECT 1 FROM tr)
    RETURNING t.term
)
SELECT (SELECT pg_catalog.count(*) FROM tr) + (SELECT pg_catalog.count(*) FROM d)`

// sqlResignWake sends a resignation's wake-ups once it committed, in a
// transaction of its own that does not wait for its WAL flush (see
// wake.go): 'h' to the successor a resignation of term $4 handed the
// group to (term_member of a later term), then 'g' to the group's
// followers while one is registered as waiting. It reads what the
// resignation committed, so it runs after it, in the same round trip
// (Elector.resign). The 'h' wake-up carries the grant, as
// "/<term>/<elected_at>/<expires_at>" (µs since the epoch) after the
// member token: the successor leads from it without reading its term
// (Elector.takeTerm). It always names a committed grant of the row's
// current term to that member; one it sends for a later change (another
// handover since) names that later grant. The 'h' goes to the channel of
// the successor's process (recorded by its sqlElectionWait, migration 14;
// the schema's for an elector older than version 14), the 'g' to the
// schema's channel, where every process's followers listen.
// $1 channel, $2 namespace, $3 election, $4 the resigned term, $5 the
// followers' wake-up payload.
const sqlResignWake = `
SELECT pg_catalog.pg_notify(w.c, w.p)
FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, (
    SELECT x.p, x.c FROM (
        SELECT 'h' || pg_catalog.octet_length($2::text)::text || ':' || $2::text || t.term_member::text
            || '/' || t.term::text
            || '/' || (EXTRACT(EPOCH FROM t.elected_at) * 1000000)::bigint::text
            || '/' || (EXTRACT(EPOCH FROM t.expires_at) * 1000000)::bigint::text AS p,
            coalesce(t.term_channel, $1::text) AS c, 1 AS o
        FROM {{schema}}.leaders t
        WHERE t.namespace = $2 AND t.election = $3 AND t.term > $4 AND t.term_member IS NOT NULL
        UNION ALL
        SELECT $5::text, $1::text, 2
        FROM {{schema}}.leaders t
        WHERE t.namespace = $2 AND t.election = $3 AND t.waiting_until > pg_catalog.clock_timestamp()
    ) AS x
    ORDER BY x.o
) AS w`

// sqlElectionWait registers an elector that follows a live leader as
// waiting for the group's hand-off, until $3 µs after the term's expiry
// (waiting_until only ever moves forward), so that a resignation notifies
// (see sqlResign and Elector.Run). It never waits for a row another
// transaction has locked (a renewal, a resignation, a takeover under way;
// VerifyTerm's FOR KEY SHARE does not conflict): it then returns no row,
// like a group with no row, and Elector.waitJoin waits for that lock,
// bounded, with sqlElectionWaitLock, and sends this statement again in the
// same transaction. It returns the
// term, whether it is still live, and how long the registration lasts.
// When the elector may lead ($9), it also names itself as the successor
// (the last to register is named), so that a resignation hands it the next
// term in its own statement (see sqlResign).
// $1 namespace, $2 election, $3 µs (the elector's TTL), $4 owner, $5 member
// token, $6 host, $7 pid, $8 app version, $9 may lead, $10 the channel of
// the elector's process (listenHub.direct; empty: none), where a resignation
// that names it successor wakes it (sqlResignWake).
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
    next_ttl_us = CASE WHEN $9::bool THEN $3::bigint ELSE t.next_ttl_us END,
    next_channel = CASE WHEN $9::bool THEN nullif($10::text, '') ELSE t.next_channel END
FROM lk WHERE t.namespace = lk.namespace AND t.election = lk.election
RETURNING t.term, t.expires_at > pg_catalog.clock_timestamp(), t.waiting_until - pg_catalog.clock_timestamp()`

// sqlElectionWaitLock waits, inside the server, for the lock on the
// group's row that sqlElectionWait's lk skipped (SKIP LOCKED): the holder
// is most often a transaction that is committing (a renewal, another
// follower's registration, a resignation) whose end nothing marks.
// Elector.waitJoin sends it only when sqlElectionWait registered nothing,
// with lock_timeout set for its transaction only (campaignLockWait, a few
// hundred ms at most), and sqlElectionWait after it in the same
// transaction (one round trip): the row stays locked by this transaction,
// which lk does not skip (its own lock), and the registration reads the
// newest version (a snapshot of its own, taken after the wait): a term
// the holder ended or handed over is reported as such, and the follower
// campaigns. Its lock (FOR NO KEY UPDATE, as lk's) does not conflict with
// VerifyTerm's FOR KEY SHARE. A wait that times out fails the
// transaction, which rolls back whole, and the follower backs off as
// before: the wait holds one pool connection, for lock_timeout at most.
// $1 namespace, $2 election.
const sqlElectionWaitLock = `
SELECT 1 FROM {{schema}}.leaders t
WHERE t.namespace = $1 AND t.election = $2
FOR NO KEY UPDATE`

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

// sqlLeave deletes this elector's member row, guarded by owner and token,
// and gives back a term a resignation handed to it (term_member, see
// sqlResign): an elector that stops while it is the named successor may
// be handed the term after it decided to stop, its member row still live
// when the resignation checked it. Left alone, that term would be held by
// nobody until it expired, every follower asleep until then.
//
// lk locks the group's row (FOR NO KEY UPDATE, waiting for a resignation
// under way, whose newest row version it then reads: read committed's
// re-check), so either the resignation came first and its grant is read
// here, or it comes after this statement, skips the locked row (its lk is
// SKIP LOCKED) or finds the member row gone, and hands nothing over. gb
// expires the term, guarded by the values lk read (owner, the member
// token, unexpired), as a resignation does (d in sqlResign); the caller
// then wakes the followers. It returns how many terms it gave back (0 or
// 1).
// $1 namespace, $2 election, $3 owner, $4 member token.
const sqlLeave = `
WITH lk AS (
    SELECT t.namespace, t.election, t.owner, t.term, t.term_member, t.expires_at > pg_catalog.clock_timestamp() AS live
    FROM {{schema}}.leaders t
    WHERE t.namespace = $1 AND t.election = $2
    FOR NO KEY UPDATE
),
dm AS (
    DELETE FROM {{schema}}.members
    WHERE namespace = $1 AND election = $2 AND owner = $3 AND token = $4
),
gb AS (
    UPDATE {{schema}}.leaders t SET expires_at = pg_catalog.clock_timestamp()
    FROM lk
    WHERE t.namespace = lk.namespace AND t.election = lk.election
      AND lk.owner = $3 AND lk.term_member = $4::bigint AND lk.live
    RETURNING t.term
)
SELECT pg_catalog.count(*) FROM gb`

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
// transactions, it bounds this one ($3, e.g. '3000ms'; empty: the term's own
// TTL, its row's expires_at - renewed_at as of the last renewal): a leader
// frozen or partitioned inside its guarded transaction would otherwise hold
// the row, and with it every election of the group, for as long as its
// connection lives. A refused term ($4 not the row's, or the row's
// expired or resigned) leaves the setting alone: the bound read from such
// a row may be a few milliseconds, and would end the caller's transaction,
// and its connection, before its rollback.
const sqlVerifyTerm = `
SELECT term, expires_at > pg_catalog.clock_timestamp(),
    CASE WHEN pg_catalog.current_setting('idle_in_transaction_session_timeout') = '0'
              AND term = $4 AND expires_at > pg_catalog.clock_timestamp()
         THEN pg_catalog.set_config('idle_in_transaction_session_timeout', coalesce(nullif($3::text, ''),
             LEAST(GREATEST(pg_catalog.ceil(pg_catalog.date_part('epoch', expires_at - renewed_at) * 1000), 1),
                 2147483647)::bigint::text || 'ms'), true) END
FROM {{schema}}.leaders
WHERE namespace = $1 AND election = $2
FOR KEY SHARE`

// maxIdleTimeoutMs is the largest idle_in_transaction_session_timeout
// PostgreSQL accepts (INT_MAX milliseconds, about 24.8 days).
const maxIdleTimeoutMs = 1<<31 - 1

// electionSQL is the election statements rendered for one schema.
type electionSQL struct {
	campaign, campaignLock, resign, resignWake, join, leave, leader, members, verifyTm, wait, waitLock string
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
		campaign: r(sqlCampaign), campaignLock: r(sqlCampaignLock), resign: r(sqlResign), resignWake: r(sqlResignWake), join: r(sqlJoin), leave: r(sqlLeave),
		leader: r(sqlLeader), members: r(sqlMembers), verifyTm: r(sqlVerifyTerm),
		wait: r(sqlElectionWait), waitLock: r(sqlElectionWaitLock),
	}
	v, _ := electionSQLCache.LoadOrStore(c.sql.schema, e)
	return v.(*electionSQL)
}

// notifyElection is the notification kind of a leadership release (see
// listen.go): it wakes the group's followers.
const notifyElection byte = 'g'

// notifyElectionGrant is the notification kind of a term handed over by a
// resignation (sqlResign): the key is the successor's member token, and
// "/<grant>" follows it (sqlResignWake).
const notifyElectionGrant byte = 'h'
