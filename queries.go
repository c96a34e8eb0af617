package sentinel

// This file: The lease statements (acquire, its waiting form, release, their set forms, the waiters' renewal and withdrawal, grants, adoption by handle, renewal, Holder, the fencing checks) and newQueries, which fills in the schema.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// queries holds every statement Sentinel issues, rendered once for the
// client's schema. Each state change is a single statement whose WHERE
// clause carries the guard (key, owner, token, state, expiry) and whose
// RETURNING decides the outcome. Expiry is always decided by the database
// clock: comparisons use clock_timestamp(), new expiries are computed from
// statement_timestamp() (never later than the real time of the write).
type queries struct {
	schema    string // quoted
	channel   string // LISTEN/NOTIFY channel for lease releases
	acquire   string
	release   string
	acquireN  string // sqlAcquireSet (coalesce.go)
	releaseS  string // sqlReleaseSet (coalesce.go)
	releaseN  string
	acqWait   string // sqlAcquireWait
	waitRenew string // sqlLeaseWaitRenew
	waitLeave string // sqlLeaseWaitLeave
	grant     string // sqlLeaseGrant
	adopt     string // sqlAdopt
	renew     string
	holder    string
	untaken   string // sqlLeaseUntaken
	verify    string
	verifyExe string
}

func newQueries(schema string) *queries {
	q := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{{schema}}", q, "{{seq}}", seqLiteral(q))
	return &queries{
		schema:    q,
		channel:   channelName(schema),
		acquire:   r.Replace(sqlAcquire),
		release:   r.Replace(sqlRelease),
		acquireN:  r.Replace(sqlAcquireSet),
		releaseS:  r.Replace(sqlReleaseSet),
		releaseN:  r.Replace(sqlReleaseMany),
		acqWait:   r.Replace(sqlAcquireWait),
		waitRenew: r.Replace(sqlLeaseWaitRenew),
		waitLeave: r.Replace(sqlLeaseWaitLeave),
		grant:     r.Replace(sqlLeaseGrant),
		adopt:     r.Replace(sqlAdopt),
		renew:     r.Replace(renewSQL()),
		holder:    r.Replace(sqlHolder),
		untaken:   r.Replace(sqlLeaseUntaken),
		verify:    r.Replace(sqlVerify),
		verifyExe: r.Replace(sqlVerifyExecution),
	}
}

// channelName is the NOTIFY channel for a schema. PostgreSQL cuts
// identifiers at 63 bytes; a longer name is shortened on a UTF-8 boundary
// and suffixed with a hash of the whole name, so it stays valid UTF-8 and
// distinct schemas keep distinct channels.
func channelName(schema string) string {
	c := "sentinel_release." + schema
	if len(c) <= 63 {
		return c
	}
	sum := sha256.Sum256([]byte(schema))
	suffix := "~" + hex.EncodeToString(sum[:4])
	cut := 63 - len(suffix)
	for cut > 0 && !utf8.RuneStart(c[cut]) {
		cut--
	}
	return c[:cut] + suffix
}

// sqlAcquire grants a lease in one statement, without waiting on a row
// another transaction has locked (a holder's fencing check, a competing
// acquirer): such a row is reported as held.
//
//   - lk/up: an existing row whose lease expired (or any row when forced,
//     $8) is locked FOR UPDATE SKIP LOCKED and taken over;
//   - ins: a key with no row is inserted (should a concurrent insert win the
//     race, its row is left to it: DO NOTHING, and the caller retries);
//   - otherwise the current holder is returned.
//
// Locks: a takeover locks the row FOR UPDATE, the only row lock that
// conflicts with VerifyToken's FOR KEY SHARE, so no grant to anyone else
// can commit while a guarded transaction of the current holder is open;
// the holder's renewals (FOR NO KEY UPDATE) do not conflict with it. A
// takeover only ever goes through lk: ON CONFLICT DO UPDATE would lock the
// row FOR NO KEY UPDATE (no key column changes) and slip past a guard.
//
// The token is minted by nextval() in the SET list or the inserted row,
// that is after the row is locked or the insert is under way, and kept
// only by the statement that writes the grant. New expiries count from
// clock_timestamp(), the time of the write, never from a statement start
// that a wait may have pushed into the past.
// A waiter that counted itself in leases.waiters (sqlAcquireWait) counts
// itself out in the grant that ends its wait ($9 = 1; 0 otherwise).
// $1 namespace, $2 key, $3 owner, $4 host, $5 pid, $6 ttl µs, $7 hard TTL µs
// (0 = none), $8 force, $9 waiters leaving (0 or 1).
const sqlAcquire = `
WITH lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.leases t
    WHERE t.namespace = $1 AND t.key = $2 AND (t.expires_at <= pg_catalog.clock_timestamp() OR $8::bool)
    FOR UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leases t SET
        owner = $3, token = pg_catalog.nextval({{seq}}), host = $4, pid = $5,
        acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + $6::bigint * interval '1 microsecond',
        hard_expires_at = CASE WHEN $7::bigint > 0 THEN pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END,
        waiters = greatest(t.waiters - $9::int, 0), granted_waiter = NULL
    FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
ins AS (
    INSERT INTO {{schema}}.leases AS t
        (namespace, key, owner, token, host, pid, acquired_at, renewed_at, expires_at, hard_expires_at)
    SELECT $1, $2, $3, pg_catalog.nextval({{seq}}), $4, $5,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + $6::bigint * interval '1 microsecond',
        CASE WHEN $7::bigint > 0 THEN pg_catalog.clock_timestamp() + $7::bigint * interval '1 microsecond'
             ELSE 'infinity'::timestamptz END
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.leases WHERE namespace = $1 AND key = $2)
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
g AS (SELECT * FROM up UNION ALL SELECT * FROM ins)
SELECT true, owner, host, pid, token, acquired_at, expires_at, hard, remaining FROM g
UNION ALL
SELECT false, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
    nullif(t.hard_expires_at, 'infinity'), t.expires_at - pg_catalog.clock_timestamp()
FROM {{schema}}.leases t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM g)`

// sqlAcquireWait is sqlAcquire for a caller that waits (Lease with
// WithWait): when the key is held, the same statement counts the caller in
// as a waiter (leases.waiters) and registers it (lease_waiters), so the
// holder's release hands the lease to it (sqlRelease): one statement to
// try or to queue. It never waits for a locked row (hl: SKIP LOCKED; a
// release, a takeover or a renewal under way), and then registers
// nothing: the caller re-checks soon. The last three columns are whether
// the key was still held once locked (a release that committed since the
// snapshot reads as not live: re-check at once), the registration's id (0:
// none) and its time left.
// A grant withdraws the caller's earlier registration ($11) in the same
// statement (and counts it out, $9 = 1), so no release can hand the key to
// a registration whose waiter already holds it.
//
// A statement that grants nothing commits without waiting for its WAL
// flush (synchronous_commit off for this transaction only; a grant
// keeps the session's setting), as a campaign that reads the leader does:
// a registration grants nothing by itself. One lost in a crash of the
// server is found gone by the waiter's next renewal, and the waiter
// registers again once it read no grant to it (the crash also cut
// the process's LISTEN connection, whose reconnection wakes every waiter
// to re-check), and a release's grant to it is durable only with it: the
// release's commit flushes the WAL up to its own record, past the
// registration's.
//
// A registration's id comes from the token sequence, in that commit that
// does not wait for its flush: a crash can lose the sequence's advance with
// it, and the sequence then hands the same id out again, to another
// registration (of the same client, on the same key, as like as not). So
// the statements that act on a registration by its id (a grant's read,
// its renewal, its withdrawal, its deletion by a grant here) also require
// the server to be in the life it was made in, its epoch: the time its
// cumulative statistics were last reset, returned last. Every start after
// a crash resets them, whether the postmaster restarted or only
// reinitialized its shared memory after a backend crashed (the OOM
// killer's SIGKILL: the postmaster's start time stays, while the WAL
// buffers that held unflushed commits are gone); a clean restart keeps
// them, as it loses no commit. (Only pg_stat_reset_shared also resets
// them: a registration is then distrusted for nothing, and registered
// again.) The postmaster's start time stands in where they are NULL. A
// registration made before a crash is then found gone, and its waiter
// registers again; except by
// its renewal and withdrawal, which also know it by its exact expiry
// (returned last, and by every renewal: another registration with the same
// id has another), so that a registration that survived a change of epoch
// without a crash (pg_stat_reset_shared, or a server that keeps no
// statistics across a clean restart) is renewed under the new epoch (its
// waiter renews at once when its LISTEN connection changed) rather than
// left to be granted unread.
// $1-$9 as sqlAcquire, $10 register, $11 the caller's registration (0:
// none), $12 the channel of the caller's process (listenHub.direct; empty:
// none, its grant's wake-up goes to the schema's channel), $13 the server's
// epoch $11 was made under ($9 counts the caller out only under it).
//
// It runs as the function lease_acquire_wait (migration 17), which reads
// the row and runs only the branch its case needs, each a plain statement
// with a cached plan (as a statement of CTEs it set up and ran every
// branch on each attempt: see the migration). The statement returns no row
// when the function could not read the row (gone meanwhile).
const sqlAcquireWait = `SELECT r.o_acquired, r.o_owner, r.o_host, r.o_pid, r.o_token, r.o_acquired_at, r.o_expires_at,
    r.o_hard, r.o_remaining, r.o_live, r.o_waiter, r.o_left, r.o_epoch, r.o_until
FROM {{schema}}.lease_acquire_wait($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, {{seq}}) AS r
WHERE r.o_acquired IS NOT NULL`

// grantWakeSQL follows the registration in a grant's wake-up ('w'): the
// grant, from the lease row t the release wrote, as "/<token>/<acquired>/
// <expires>/<hard expiry or empty>", times in µs since the epoch (see
// Client.takeGrant). lease_release (migration 11) writes the same
// expression for a lone release (TestGrantWakeFormatsAgree).
const grantWakeSQL = ` || '/' || t.token::text
        || '/' || (EXTRACT(EPOCH FROM t.acquired_at) * 1000000)::bigint::text
        || '/' || (EXTRACT(EPOCH FROM t.expires_at) * 1000000)::bigint::text
        || '/' || CASE WHEN t.hard_expires_at = 'infinity' THEN '' ELSE (EXTRACT(EPOCH FROM t.hard_expires_at) * 1000000)::bigint::text END`

// sqlRelease ends a lease guarded by owner, token and expiry and, when a
// caller waits for the key (registered in lease_waiters, see
// sqlAcquireWait), hands the lease to the oldest live registration in the
// same statement. It calls lease_release_to (migration 14: migration 11's
// lease_release, returning also the channel of the waiter's process; its
// hand-over as plain statements since migration 18), which
// runs only the write the case needs: one UPDATE when nobody waits (the
// common case); otherwise it locks the row FOR UPDATE, SKIP LOCKED (the
// lock that conflicts with VerifyToken's FOR KEY SHARE, as an acquirer's
// takeover takes), deletes the oldest registration unexpired on the
// database clock and writes the grant for it (a token minted under the row
// lock, expiries counted from clock_timestamp() with the waiter's TTL and
// hard TTL, granted_waiter naming it). Every step re-checks its guard on
// the newest row version, so a waiter counted in before the release's write
// is always seen: see the migration for the whole argument, and
// waitAcquire.
//
// It returns the count of leases ended or handed over (0 or 1) and the
// wake-up it decided, empty for none: 'w' for a grant, naming the
// registration and carrying the grant ("<waiter>/<token>/<µs>/<µs>/<µs or
// empty>", times in µs since the epoch; Client.takeGrant, or sqlLeaseGrant
// when the waiter reads it), 'l' when some caller waits but none could be
// granted, and the channel to send it on: the granted registration's
// process's own (sqlAcquireWait's $12), empty for the schema's channel (an
// 'l', or a registration of a client older than version 14). A release
// nobody waits for sends no wake-up. The wake-up is returned, not sent: the
// release commits durably without the database's notify lock, and the
// client sends it right after the commit, in a transaction of its own
// (wake.go), so that concurrent releases share WAL flushes.
//
// The row is kept, expired, rather than deleted: the next grant of the key
// then takes it over and mints its token under the row lock, so no grant
// can ever carry a token minted before an earlier grant of the same key.
// Prune removes rows long expired.
//
// Written as one statement with the hand-over's writes in CTEs (as
// sqlReleaseSet still is, for batches), a release nobody waited for cost
// 1.45x a bare UPDATE's round trip; through the function, 1.1-1.15x
// (docs/benchmarks-history.md, issue 30, "Sixth part").
// $1 namespace, $2 key, $3 owner, $4 token.
const sqlRelease = `SELECT r.n, r.wake, r.channel FROM {{schema}}.lease_release_to($1, $2, $3, $4, {{seq}}) AS r`

// sqlAcquireSet is sqlAcquire for many keys in one statement, for the
// coalescer (coalesce.go): parameter $k is the array of sqlAcquire's $k
// over the batch's calls, all on distinct keys. Each key is decided exactly
// as sqlAcquire decides it; rows are locked and inserted in key order. It
// returns, per call, its ordinal in the batch then sqlAcquire's columns; a
// call with no row is one whose key another grant took after the snapshot
// (sqlAcquire returns no row then too).
const sqlAcquireSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::text[]), pg_catalog.unnest($5::bigint[]), pg_catalog.unnest($6::bigint[]),
        pg_catalog.unnest($7::bigint[]), pg_catalog.unnest($8::bool[]), pg_catalog.unnest($9::bigint[]))
        WITH ORDINALITY AS i(ns, key, owner, host, pid, ttl, hard, force, leaving, n)
),
lk AS (
    SELECT t.namespace, t.key, i.n AS ord FROM {{schema}}.leases t JOIN i ON t.namespace = i.ns AND t.key = i.key
    WHERE (t.expires_at <= pg_catalog.clock_timestamp() OR i.force)
    ORDER BY t.namespace, t.key
    FOR UPDATE OF t SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leases t SET
        owner = ($3::text[])[lk.ord], token = pg_catalog.nextval({{seq}}), host = ($4::text[])[lk.ord],
        pid = (($5::bigint[])[lk.ord])::int,
        acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + ($6::bigint[])[lk.ord] * interval '1 microsecond',
        hard_expires_at = CASE WHEN ($7::bigint[])[lk.ord] > 0
                          THEN pg_catalog.clock_timestamp() + ($7::bigint[])[lk.ord] * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END,
        waiters = greatest(t.waiters - (($9::bigint[])[lk.ord])::int, 0), granted_waiter = NULL
    FROM lk
    WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING lk.ord, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
ins AS (
    INSERT INTO {{schema}}.leases AS t
        (namespace, key, owner, token, host, pid, acquired_at, renewed_at, expires_at, hard_expires_at)
    SELECT i.ns, i.key, i.owner, pg_catalog.nextval({{seq}}), i.host, i.pid::int,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + i.ttl * interval '1 microsecond',
        CASE WHEN i.hard > 0 THEN pg_catalog.clock_timestamp() + i.hard * interval '1 microsecond'
             ELSE 'infinity'::timestamptz END
    FROM i
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.leases x WHERE x.namespace = i.ns AND x.key = i.key)
    ORDER BY i.ns, i.key
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING t.namespace, t.key, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - pg_catalog.statement_timestamp() AS remaining
),
ik AS (
    SELECT pg_catalog.array_agg(pg_catalog.octet_length(i.ns)::text || ':' || i.ns || i.key ORDER BY i.n) AS k FROM i
),
g AS (
    SELECT * FROM up
    UNION ALL
    SELECT pg_catalog.array_position((SELECT ik.k FROM ik), pg_catalog.octet_length(ins.namespace)::text || ':' || ins.namespace || ins.key)::bigint,
        ins.owner, ins.host, ins.pid, ins.token, ins.acquired_at, ins.expires_at, ins.hard, ins.remaining
    FROM ins
)
SELECT g.ord, true, g.owner, g.host, g.pid, g.token, g.acquired_at, g.expires_at, g.hard, g.remaining FROM g
UNION ALL
SELECT i.n, false, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
    nullif(t.hard_expires_at, 'infinity'), t.expires_at - pg_catalog.clock_timestamp()
FROM i JOIN {{schema}}.leases t ON t.namespace = i.ns AND t.key = i.key
WHERE i.n <> ALL (coalesce((SELECT pg_catalog.array_agg(g.ord) FROM g), '{}'::bigint[]))`

// sqlReleaseSet is sqlRelease for many leases in one statement, for the
// coalescer: parameter $k is the array of sqlRelease's $k over the
// batch's calls, all on distinct keys. It returns, per call, its ordinal,
// the count of leases it ended (0 or 1), its wake-up and the wake-up's
// channel. Each key is handed to its oldest live waiter, or ended,
// exactly as sqlRelease does.
const sqlReleaseSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::bigint[]))
        WITH ORDINALITY AS i(ns, key, owner, token, n)
),
lk AS (
    SELECT t.namespace, t.key, i.n AS ord FROM {{schema}}.leases t JOIN i ON t.namespace = i.ns AND t.key = i.key
    WHERE t.owner = i.owner AND t.token = i.token AND t.expires_at > pg_catalog.clock_timestamp() AND t.waiters > 0
    ORDER BY t.namespace, t.key
    FOR UPDATE OF t SKIP LOCKED
),
w AS (
    SELECT x.namespace, x.key, x.waiter, lk.ord FROM lk CROSS JOIN LATERAL (
        SELECT y.namespace, y.key, y.waiter FROM {{schema}}.lease_waiters y
        WHERE y.namespace = lk.namespace AND y.key = lk.key AND y.expires_at > pg_catalog.clock_timestamp()
        ORDER BY y.waiter LIMIT 1
        FOR UPDATE SKIP LOCKED) x
),
dw AS (
    DELETE FROM {{schema}}.lease_waiters x USING w
    WHERE x.namespace = w.namespace AND x.key = w.key AND x.waiter = w.waiter
    RETURNING x.namespace, x.key, x.waiter, x.owner, x.host, x.pid, x.ttl_us, x.hard_us, x.channel, w.ord
),
tr AS (
    UPDATE {{schema}}.leases t SET
        owner = dw.owner, token = pg_catalog.nextval({{seq}}), host = dw.host, pid = dw.pid,
        acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + dw.ttl_us * interval '1 microsecond',
        hard_expires_at = CASE WHEN dw.hard_us > 0 THEN pg_catalog.clock_timestamp() + dw.hard_us * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END,
        waiters = greatest(t.waiters - 1, 0), granted_waiter = dw.waiter
    FROM dw
    WHERE t.namespace = dw.namespace AND t.key = dw.key
    RETURNING dw.ord, 'w' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || dw.waiter::text` + grantWakeSQL + ` AS wake,
        coalesce(dw.channel, '') AS channel
),
d AS (
    UPDATE {{schema}}.leases t SET expires_at = pg_catalog.clock_timestamp()
    FROM i
    WHERE t.namespace = i.ns AND t.key = i.key AND t.owner = i.owner AND t.token = i.token
      AND t.expires_at > pg_catalog.clock_timestamp()
      AND i.n <> ALL (coalesce((SELECT pg_catalog.array_agg(tr.ord) FROM tr), '{}'::bigint[]))
    RETURNING i.n AS ord, CASE WHEN t.waiters > 0 THEN
        'l' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key END AS wake
)
SELECT tr.ord, 1::bigint, coalesce(tr.wake, ''), tr.channel FROM tr
UNION ALL
SELECT d.ord, 1::bigint, coalesce(d.wake, ''), '' FROM d
UNION ALL
SELECT i.n, 0::bigint, '', '' FROM i
WHERE i.n <> ALL (coalesce((SELECT pg_catalog.array_agg(x.ord) FROM (SELECT tr.ord FROM tr UNION ALL SELECT d.ord FROM d) x),
    '{}'::bigint[]))`

// sqlReleaseMany is sqlRelease for many leases of one owner (Close); it
// returns a wake-up only for keys that have waiters (sent after the
// commit, wake.go).
// $1 namespaces, $2 keys, $3 tokens, $4 owner.
const sqlReleaseMany = `
WITH d AS (
    UPDATE {{schema}}.leases t SET expires_at = pg_catalog.clock_timestamp()
    FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::bigint[])) AS v(ns, key, token)
    WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $4
      AND t.expires_at > pg_catalog.clock_timestamp()
    RETURNING t.namespace, t.key, CASE WHEN t.waiters > 0 THEN
        'l' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key END AS wake
)
SELECT d.namespace, d.key, coalesce(d.wake, '') FROM d`

// sqlLeaseWaitRenew renews a waiter's registration for its TTL ($4 µs). No
// row: it is gone (granted, removed as long expired, or made before the
// server restarted: see sqlAcquireWait).
// $1 namespace, $2 key, $3 waiter, $4 ttl µs, $5 the server's epoch the
// registration was made under, $6 its exact expiry as last written (either
// identifies it: see sqlAcquireWait). It returns the time left, the new
// expiry and the server's epoch.
const sqlLeaseWaitRenew = `
UPDATE {{schema}}.lease_waiters x
SET expires_at = pg_catalog.clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE x.namespace = $1 AND x.key = $2 AND x.waiter = $3
  AND (coalesce(pg_catalog.pg_stat_get_bgwriter_stat_reset_time(), pg_catalog.pg_postmaster_start_time()) = $5::timestamptz OR x.expires_at = $6::timestamptz)
RETURNING x.expires_at - pg_catalog.clock_timestamp(), x.expires_at, coalesce(pg_catalog.pg_stat_get_bgwriter_stat_reset_time(), pg_catalog.pg_postmaster_start_time())`

// sqlLeaseWaitLeave withdraws a registration and counts the waiter out
// (best effort: a locked lease row is skipped; a count left high costs a
// NOTIFY). It returns whether the registration was still there: when it
// was not, a release may have granted the lease to it (sqlLeaseGrant).
// $1 namespace, $2 key, $3 waiter, $4 the server's epoch the
// registration was made under, $5 its exact expiry as last written (see
// sqlAcquireWait).
const sqlLeaseWaitLeave = `
WITH dw AS (
    DELETE FROM {{schema}}.lease_waiters x
    WHERE x.namespace = $1 AND x.key = $2 AND x.waiter = $3
      AND (coalesce(pg_catalog.pg_stat_get_bgwriter_stat_reset_time(), pg_catalog.pg_postmaster_start_time()) = $4::timestamptz OR x.expires_at = $5::timestamptz)
    RETURNING 1
),
lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.leases t
    WHERE EXISTS (SELECT 1 FROM dw) AND t.namespace = $1 AND t.key = $2
    FOR NO KEY UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leases t SET waiters = greatest(t.waiters - 1, 0)
    FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
)
SELECT EXISTS (SELECT 1 FROM dw)`

// sqlLeaseGrant reads a grant a release made to registration $4 of owner
// $3 (sqlRelease): the lease as it is now, if it is still that grant and
// unexpired. The time left is measured by this read, on the database
// clock, after the grant: a deadline counted from the read's send time is
// never later than the grant's expiry.
// $1 namespace, $2 key, $3 owner, $4 waiter, $5 the server's epoch the
// registration was made under (a grant to the same id made after a
// restart is another registration's: see sqlAcquireWait).
const sqlLeaseGrant = `
SELECT t.token, t.acquired_at, t.expires_at, nullif(t.hard_expires_at, 'infinity'),
    t.expires_at - pg_catalog.clock_timestamp()
FROM {{schema}}.leases t
WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.granted_waiter = $4
  AND t.expires_at > pg_catalog.clock_timestamp() AND coalesce(pg_catalog.pg_stat_get_bgwriter_stat_reset_time(), pg_catalog.pg_postmaster_start_time()) = $5::timestamptz`

// sqlAdopt transfers a live lease, named by its handle, to another
// client (Client.AdoptHandle): a new grant of the key to a new holder, in
// one statement guarded by the handle's owner and token and by the
// lease's expiry and hard expiry on the database clock.
//
// It locks the row FOR UPDATE, SKIP LOCKED, as a takeover does
// (sqlAcquire's lk): the lock that conflicts with VerifyToken's FOR KEY
// SHARE, so no adoption commits while a guarded transaction on the old
// token is open, and none runs beside one after it: the old token is
// stale from the commit on. It writes this client's owner, host and pid,
// mints a new token (nextval under the row lock, from the sequence every
// grant uses: tokens only grow, so the handle and every copy of it are
// stale), sets acquired_at and renewed_at, and an expiry of one TTL
// counted from clock_timestamp(), never past the hard expiry, which it
// keeps: the hard TTL bounds the lease, whoever holds it. It clears
// granted_waiter (the grant a release made to a waiter is read by that
// waiter's owner: the row is no longer its grant) and keeps waiters: a
// caller waiting for the key (WithWait) waits on, and the adopter's
// release hands the key to it as the first holder's would have. Nothing
// is notified: a held key changing hands frees nothing.
//
// It returns one row when it adopted (true, then the grant as sqlAcquire
// returns it, time left counted from statement_timestamp()). Otherwise
// the live row as it is, if any: false, then whether it still carries
// the handle (its owner and token: locked by another transaction, a
// renewal or a guarded transaction, so it was skipped: busy, try again)
// and its token (another: the key's current holder). No row: the key is
// free or expired.
// $1 namespace, $2 key, $3 the handle's owner, $4 its token, $5 owner,
// $6 host, $7 pid, $8 ttl µs.
const sqlAdopt = `
WITH lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.leases t
    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.token = $4
      AND t.expires_at > pg_catalog.clock_timestamp() AND t.hard_expires_at > pg_catalog.clock_timestamp()
    FOR UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leases t SET
        owner = $5, token = pg_catalog.nextval({{seq}}), host = $6, pid = $7,
        acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = least(pg_catalog.clock_timestamp() + $8::bigint * interval '1 microsecond', t.hard_expires_at),
        granted_waiter = NULL
    FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING t.token, t.acquired_at, t.expires_at, nullif(t.hard_expires_at, 'infinity') AS hard,
        t.expires_at - pg_catalog.statement_timestamp() AS remaining
)
SELECT true, false, token, acquired_at, expires_at, hard, remaining FROM up
UNION ALL
SELECT false, t.owner = $3 AND t.token = $4, t.token, t.acquired_at, t.expires_at,
    nullif(t.hard_expires_at, 'infinity'), interval '0'
FROM {{schema}}.leases t
WHERE t.namespace = $1 AND t.key = $2 AND t.expires_at > pg_catalog.clock_timestamp()
  AND NOT EXISTS (SELECT 1 FROM up)`

// renewKind is one kind of row the heartbeat renews. Every kind adds a
// lock+update step to the one renewal statement per tick (see renewSQL), so a
// client renews its leases, executions and anything else it keeps alive in
// one round trip however many it holds.
type renewKind struct {
	kind leaseKind
	// cte defines CTEs for this kind over v (ns, key, token, ttl, kind) and
	// $1 (the owner). Its last CTE, named by `name`, updates the rows it
	// renews and returns (namespace, key, token, expires_at, hard_expires_at)
	// with hard_expires_at 'infinity' when there is none. Rows locked by
	// another transaction are skipped (SKIP LOCKED), never waited for.
	cte  string
	name string
	// alive is a predicate over v and $1: the row of v is still held by
	// this owner, at this token, unexpired. It tells a skipped (busy) row
	// from a lost one.
	alive string
}

// renewKinds are the kinds of rows the heartbeat renews, in a fixed order:
// every kind in one place (the kinds' numbers are defined next to their
// tables' code: kindLease, kindExecution, kindLeader, kindMember,
// kindTicket).
var renewKinds = []renewKind{
	{
		kind: kindLease, name: "lu",
		cte: `lc AS (
    SELECT t.namespace, t.key, v.ttl FROM {{schema}}.leases t
    JOIN v ON v.kind = 0 AND t.namespace = v.ns AND t.key = v.key AND t.token = v.token
    WHERE t.owner = $1 AND t.expires_at > pg_catalog.clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
lu AS (
    UPDATE {{schema}}.leases t
    SET expires_at = greatest(t.expires_at,
            least(pg_catalog.statement_timestamp() + lc.ttl * interval '1 microsecond', t.hard_expires_at)),
        renewed_at = pg_catalog.statement_timestamp()
    FROM lc WHERE t.namespace = lc.namespace AND t.key = lc.key
    RETURNING t.namespace, t.key, t.token, t.expires_at, t.hard_expires_at
)`,
		alive: `EXISTS (SELECT 1 FROM {{schema}}.leases t
             WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $1
               AND t.expires_at > pg_catalog.clock_timestamp())`,
	},
	{
		kind: kindExecution, name: "eu",
		cte: `ec AS (
    SELECT t.namespace, t.key, v.ttl FROM {{schema}}.executions t
    JOIN v ON v.kind = 1 AND t.namespace = v.ns AND t.key = v.key AND t.token = v.token
    WHERE t.owner = $1 AND t.state IN ('claimed', 'executing') AND t.lease_expires_at > pg_catalog.clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
eu AS (
    UPDATE {{schema}}.executions t
    SET lease_expires_at = greatest(t.lease_expires_at,
            least(pg_catalog.statement_timestamp() + ec.ttl * interval '1 microsecond', t.hard_expires_at))
    FROM ec WHERE t.namespace = ec.namespace AND t.key = ec.key
    RETURNING t.namespace, t.key, t.token, t.lease_expires_at AS expires_at, t.hard_expires_at
)`,
		alive: `EXISTS (SELECT 1 FROM {{schema}}.executions t
             WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $1
               AND t.state IN ('claimed', 'executing') AND t.lease_expires_at > pg_catalog.clock_timestamp())`,
	},
	// Elections (election_sql.go): a term's leadership lease, a running elector.
	renewKind{
		kind: kindLeader, name: "elu",
		cte: fmt.Sprintf(`elc AS (
    SELECT t.namespace, t.election, v.ttl FROM {{schema}}.leaders t
    JOIN v ON v.kind = %d AND t.namespace = v.ns AND t.election = v.key AND t.term = v.token
    WHERE t.owner = $1 AND t.expires_at > pg_catalog.clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
elu AS (
    UPDATE {{schema}}.leaders t
    SET expires_at = greatest(t.expires_at, pg_catalog.statement_timestamp() + elc.ttl * interval '1 microsecond'),
        renewed_at = pg_catalog.statement_timestamp()
    FROM elc WHERE t.namespace = elc.namespace AND t.election = elc.election
    RETURNING t.namespace, t.election AS key, t.term AS token, t.expires_at, 'infinity'::timestamptz AS hard_expires_at
)`, kindLeader),
		alive: `EXISTS (SELECT 1 FROM {{schema}}.leaders t
             WHERE t.namespace = v.ns AND t.election = v.key AND t.term = v.token AND t.owner = $1
               AND t.expires_at > pg_catalog.clock_timestamp())`,
	},
	renewKind{
		kind: kindMember, name: "emu",
		cte: fmt.Sprintf(`emc AS (
    SELECT t.namespace, t.election, t.owner, v.ttl FROM {{schema}}.members t
    JOIN v ON v.kind = %d AND t.namespace = v.ns AND t.election = v.key AND t.token = v.token
    WHERE t.owner = $1 AND t.expires_at > pg_catalog.clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
emu AS (
    UPDATE {{schema}}.members t
    SET expires_at = greatest(t.expires_at, pg_catalog.statement_timestamp() + emc.ttl * interval '1 microsecond'),
        last_poll = pg_catalog.statement_timestamp()
    FROM emc WHERE t.namespace = emc.namespace AND t.election = emc.election AND t.owner = emc.owner
    RETURNING t.namespace, t.election AS key, t.token, t.expires_at, 'infinity'::timestamptz AS hard_expires_at
)`, kindMember),
		alive: `EXISTS (SELECT 1 FROM {{schema}}.members t
             WHERE t.namespace = v.ns AND t.election = v.key AND t.token = v.token AND t.owner = $1
               AND t.expires_at > pg_catalog.clock_timestamp())`,
	},
	// Queues (queue_sql.go): a ticket, waiting or served.
	renewKind{
		kind: kindTicket, name: "qtu",
		cte: fmt.Sprintf(`qtc AS (
    SELECT t.namespace, t.resource, t.ticket, v.ttl FROM {{schema}}.tickets t
    JOIN v ON v.kind = %d AND t.namespace = v.ns AND t.resource = v.key AND t.ticket = v.token
    WHERE t.owner = $1 AND t.expires_at > pg_catalog.clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
qtu AS (
    UPDATE {{schema}}.tickets t
    SET expires_at = greatest(t.expires_at, pg_catalog.statement_timestamp() + qtc.ttl * interval '1 microsecond')
    FROM qtc WHERE t.namespace = qtc.namespace AND t.resource = qtc.resource AND t.ticket = qtc.ticket
    RETURNING t.namespace, t.resource AS key, t.ticket AS token, t.expires_at, 'infinity'::timestamptz AS hard_expires_at
)`, kindTicket),
		alive: `EXISTS (SELECT 1 FROM {{schema}}.tickets t
             WHERE t.namespace = v.ns AND t.resource = v.key AND t.ticket = v.token AND t.owner = $1
               AND t.expires_at > pg_catalog.clock_timestamp())`,
	},
}

// renewSQL assembles the renewal statement from renewKinds. It renews a
// batch of rows held by one owner; every row is guarded by owner, token and
// expiry (and state where it matters), and no renewal ever moves an expiry
// earlier than the one already granted (a handle renewed with a short TTL
// must not cut a holder's promised lease). For every input row it reports
// "renewed" (with the time left and whether the hard TTL caps it), "busy"
// (locked by another transaction: a completing OnceTx, a takeover under way;
// retry soon) or "lost". Input rows are matched to results by (namespace,
// key, kind, token).
// $1 owner; the rows as parallel arrays: $2 namespaces, $3 keys, $4 tokens,
// $5 TTLs µs, $6 kinds.
func renewSQL() string {
	var b strings.Builder
	// The arrays are read through scalar sub-selects, so the planner never
	// sees their length, not even in the custom plans PostgreSQL makes for
	// a prepared statement's first five runs on a connection. Seeing
	// thousands of rows, those plans' estimated cost crossed
	// jit_optimize_above_cost, and each such renewal spent over a second
	// compiling (5,000 leases: 1,474 ms with JIT, 56 ms without), past the
	// renewal's bound: the bench's 10,000 leases were all lost. The plan
	// is then the generic plan's shape, which runs from the sixth on.
	b.WriteString(`
WITH v AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest((SELECT $2::text[])), pg_catalog.unnest((SELECT $3::text[])),
        pg_catalog.unnest((SELECT $4::bigint[])), pg_catalog.unnest((SELECT $5::bigint[])),
        pg_catalog.unnest((SELECT $6::int2[])))
        AS v(ns, key, token, ttl, kind)
)`)
	for _, k := range renewKinds {
		b.WriteString(",\n")
		b.WriteString(k.cte)
	}
	b.WriteString(",\nu AS (\n")
	for i, k := range renewKinds {
		if i > 0 {
			b.WriteString("    UNION ALL\n")
		}
		fmt.Fprintf(&b, "    SELECT namespace, key, %d::int2 AS kind, token, expires_at, hard_expires_at FROM %s\n", k.kind, k.name)
	}
	b.WriteString(`)
SELECT v.ns, v.key, v.kind, v.token,
    CASE WHEN u.key IS NOT NULL THEN 'renewed'`)
	for _, k := range renewKinds {
		fmt.Fprintf(&b, "\n         WHEN v.kind = %d AND %s THEN 'busy'", k.kind, k.alive)
	}
	b.WriteString(`
         ELSE 'lost' END,
    coalesce(u.expires_at - pg_catalog.statement_timestamp(), interval '0'),
    coalesce(u.expires_at >= u.hard_expires_at, false),
    u.expires_at
FROM v LEFT JOIN u ON u.namespace = v.ns AND u.key = v.key AND u.kind = v.kind AND u.token = v.token`)
	return b.String()
}

// sqlHolder reads the current, unexpired holder of a lease.
const sqlHolder = `
SELECT owner, host, pid, token, acquired_at, expires_at, nullif(hard_expires_at, 'infinity')
FROM {{schema}}.leases
WHERE namespace = $1 AND key = $2 AND expires_at > pg_catalog.clock_timestamp()`

// sqlLeaseUntaken reads whether a lease's row still carries its grant,
// expired or not: nobody was granted the key since (every grant mints a
// new token under the row's lock). Lease.Release reads it when a retry
// after a failed release statement finds nothing to free.
// $1 namespace, $2 key, $3 owner, $4 token.
const sqlLeaseUntaken = `
SELECT EXISTS (SELECT 1 FROM {{schema}}.leases
               WHERE namespace = $1 AND key = $2 AND owner = $3 AND token = $4)`

// sqlVerify checks that a lease token is current and locks the lease row
// FOR KEY SHARE until the caller's transaction ends.
//
// Why that lock mode. PostgreSQL's row locks conflict as follows (x: the
// two cannot be held together; the second one waits, or skips the row):
//
//	                 KEY SHARE  SHARE  NO KEY UPDATE  UPDATE
//	KEY SHARE                                           x
//	SHARE                              x                x
//	NO KEY UPDATE               x      x                x
//	UPDATE              x       x      x                x
//
// The holder's renewals lock the row FOR NO KEY UPDATE SKIP LOCKED and
// update only non-key columns (a NO KEY UPDATE lock too). A guard that
// locked FOR SHARE made every renewal skip the row as busy while a guarded
// transaction was open, so a holder guarding its writes back to back lost
// its own lease at its renewal deadline. FOR KEY SHARE lets renewals
// through. What a guard must exclude is a grant to someone else, and every
// such grant locks the row FOR UPDATE first (sqlAcquire's lk; a takeover
// never goes through ON CONFLICT DO UPDATE, which would lock FOR NO KEY
// UPDATE), and Prune deletes (a FOR UPDATE lock): both conflict with KEY
// SHARE, so they skip or wait until the guarded transaction ends. A
// renewal's new row version carries the KEY SHARE lock over (PostgreSQL
// keeps key-share lockers across a non-key update), so a takeover after a
// renewal still sees it. The holder's own release (a non-key update) does
// not wait for its guarded transaction; it frees the key for nothing but a
// FOR UPDATE grant, which still waits. So a stale token can never commit a
// guarded write after another holder was granted the key.
const sqlVerify = `
SELECT token, expires_at > pg_catalog.clock_timestamp()
FROM {{schema}}.leases
WHERE namespace = $1 AND key = $2
FOR KEY SHARE`

// sqlVerifyExecution is sqlVerify for the token of a running Once: FOR KEY
// SHARE for the same reasons. Every transition that hands the key to
// someone else locks the row FOR UPDATE first: a claim's takeover
// (sqlClaim's lk) and an operator's transition (sqlOperator's lk).
const sqlVerifyExecution = `
SELECT token, state IN ('claimed', 'executing') AND lease_expires_at > pg_catalog.clock_timestamp()
FROM {{schema}}.executions
WHERE namespace = $1 AND key = $2
FOR KEY SHARE`
