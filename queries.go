package sentinel

import (
	"strings"

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
	releaseN  string
	renew     string
	holder    string
	verify    string
	verifyExe string
}

func newQueries(schema string) *queries {
	q := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("{{schema}}", q)
	return &queries{
		schema:    q,
		channel:   channelName(schema),
		acquire:   r.Replace(sqlAcquire),
		release:   r.Replace(sqlRelease),
		releaseN:  r.Replace(sqlReleaseMany),
		renew:     r.Replace(sqlRenew),
		holder:    r.Replace(sqlHolder),
		verify:    r.Replace(sqlVerify),
		verifyExe: r.Replace(sqlVerifyExecution),
	}
}

// channelName is the NOTIFY channel for a schema, shortened to fit
// PostgreSQL's 63-byte identifier limit.
func channelName(schema string) string {
	c := "sentinel_release." + schema
	if len(c) > 63 {
		c = c[:63]
	}
	return c
}

// sqlAcquire grants a lease in one statement, without waiting on a row
// another transaction has locked (a holder's fencing check, a competing
// acquirer): such a row is reported as held.
//
//   - lk/up: an existing row whose lease expired (or any row when forced,
//     $8) is locked SKIP LOCKED and taken over;
//   - ins: a key with no row is inserted (should a concurrent insert win the
//     race, its row is taken over only if expired);
//   - otherwise the current holder is returned.
//
// The token is minted by nextval() in the SET list or the inserted row,
// that is after the row is locked or the insert is under way, and kept
// only by the statement that writes the grant. New expiries count from
// clock_timestamp(), the time of the write, never from a statement start
// that a wait may have pushed into the past.
// $1 namespace, $2 key, $3 owner, $4 host, $5 pid, $6 ttl µs, $7 hard TTL µs
// (0 = none), $8 force.
const sqlAcquire = `
WITH lk AS (
    SELECT t.namespace, t.key FROM {{schema}}.leases t
    WHERE t.namespace = $1 AND t.key = $2 AND (t.expires_at <= clock_timestamp() OR $8::bool)
    FOR NO KEY UPDATE SKIP LOCKED
),
up AS (
    UPDATE {{schema}}.leases t SET
        owner = $3, token = nextval('{{schema}}.fencing_token'), host = $4, pid = $5,
        acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
        expires_at = clock_timestamp() + $6::bigint * interval '1 microsecond',
        hard_expires_at = CASE WHEN $7::bigint > 0 THEN clock_timestamp() + $7::bigint * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END
    FROM lk WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - statement_timestamp() AS remaining
),
ins AS (
    INSERT INTO {{schema}}.leases AS t
        (namespace, key, owner, token, host, pid, acquired_at, renewed_at, expires_at, hard_expires_at)
    SELECT $1, $2, $3, nextval('{{schema}}.fencing_token'), $4, $5,
        clock_timestamp(), clock_timestamp(),
        clock_timestamp() + $6::bigint * interval '1 microsecond',
        CASE WHEN $7::bigint > 0 THEN clock_timestamp() + $7::bigint * interval '1 microsecond'
             ELSE 'infinity'::timestamptz END
    WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.leases WHERE namespace = $1 AND key = $2)
    ON CONFLICT (namespace, key) DO UPDATE SET
        owner = excluded.owner, token = nextval('{{schema}}.fencing_token'), host = excluded.host,
        pid = excluded.pid, acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
        expires_at = clock_timestamp() + $6::bigint * interval '1 microsecond',
        hard_expires_at = CASE WHEN $7::bigint > 0 THEN clock_timestamp() + $7::bigint * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END
    WHERE t.expires_at <= clock_timestamp() OR $8::bool
    RETURNING t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
        nullif(t.hard_expires_at, 'infinity') AS hard, t.expires_at - statement_timestamp() AS remaining
),
g AS (SELECT * FROM up UNION ALL SELECT * FROM ins)
SELECT true, owner, host, pid, token, acquired_at, expires_at, hard, remaining FROM g
UNION ALL
SELECT false, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at,
    nullif(t.hard_expires_at, 'infinity'), t.expires_at - clock_timestamp()
FROM {{schema}}.leases t
WHERE t.namespace = $1 AND t.key = $2 AND NOT EXISTS (SELECT 1 FROM g)`

// sqlRelease ends a lease guarded by owner, token and expiry, and notifies
// waiters in the same statement. The row is kept, expired, rather than
// deleted: the next grant of the key then takes it over and mints its token
// under the row lock, so no grant can ever carry a token minted before an
// earlier grant of the same key. Prune removes rows long expired.
// $1 namespace, $2 key, $3 owner, $4 token, $5 channel.
const sqlRelease = `
WITH d AS (
    UPDATE {{schema}}.leases t SET expires_at = clock_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.token = $4 AND t.expires_at > clock_timestamp()
    RETURNING t.namespace, t.key
)
SELECT count(*) FROM d, LATERAL (SELECT pg_notify($5, length(d.namespace)::text || ':' || d.namespace || d.key)) AS n`

// sqlReleaseMany is sqlRelease for many leases of one owner (Close).
// $1 namespaces, $2 keys, $3 tokens, $4 owner, $5 channel.
const sqlReleaseMany = `
WITH d AS (
    UPDATE {{schema}}.leases t SET expires_at = clock_timestamp()
    FROM unnest($1::text[], $2::text[], $3::bigint[]) AS v(ns, key, token)
    WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $4
      AND t.expires_at > clock_timestamp()
    RETURNING t.namespace, t.key
)
SELECT d.namespace, d.key FROM d, LATERAL (SELECT pg_notify($5, length(d.namespace)::text || ':' || d.namespace || d.key)) AS n`

// sqlRenew renews a batch of leases and execution leases held by one owner
// in one statement. Every row is guarded by owner, token and expiry (and
// state for executions); rows locked by another transaction (a fencing
// check, a completing OnceTx) are skipped this time rather than waited for.
// For every input row it reports "renewed" (with the time left and whether
// the hard TTL caps it), "busy" (locked; retry soon) or "lost".
// $1 namespaces, $2 keys, $3 tokens, $4 TTLs µs, $5 is-execution flags,
// $6 owner.
const sqlRenew = `
WITH v AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bool[])
        AS v(ns, key, token, ttl, exec)
),
lc AS (
    SELECT t.namespace, t.key, v.ttl FROM {{schema}}.leases t
    JOIN v ON NOT v.exec AND t.namespace = v.ns AND t.key = v.key AND t.token = v.token
    WHERE t.owner = $6 AND t.expires_at > clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
lu AS (
    UPDATE {{schema}}.leases t
    SET expires_at = least(statement_timestamp() + lc.ttl * interval '1 microsecond', t.hard_expires_at),
        renewed_at = statement_timestamp()
    FROM lc WHERE t.namespace = lc.namespace AND t.key = lc.key
    RETURNING t.namespace, t.key, t.expires_at, t.hard_expires_at
),
ec AS (
    SELECT t.namespace, t.key, v.ttl FROM {{schema}}.executions t
    JOIN v ON v.exec AND t.namespace = v.ns AND t.key = v.key AND t.token = v.token
    WHERE t.owner = $6 AND t.state IN ('claimed', 'executing') AND t.lease_expires_at > clock_timestamp()
    FOR NO KEY UPDATE OF t SKIP LOCKED
),
eu AS (
    UPDATE {{schema}}.executions t
    SET lease_expires_at = least(statement_timestamp() + ec.ttl * interval '1 microsecond', t.hard_expires_at)
    FROM ec WHERE t.namespace = ec.namespace AND t.key = ec.key
    RETURNING t.namespace, t.key, t.lease_expires_at AS expires_at, t.hard_expires_at
),
u AS (
    SELECT namespace, key, false AS exec, expires_at, hard_expires_at FROM lu
    UNION ALL
    SELECT namespace, key, true, expires_at, hard_expires_at FROM eu
)
SELECT v.ns, v.key, v.exec,
    CASE WHEN u.key IS NOT NULL THEN 'renewed'
         WHEN NOT v.exec AND EXISTS (SELECT 1 FROM {{schema}}.leases t
             WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $6
               AND t.expires_at > clock_timestamp()) THEN 'busy'
         WHEN v.exec AND EXISTS (SELECT 1 FROM {{schema}}.executions t
             WHERE t.namespace = v.ns AND t.key = v.key AND t.token = v.token AND t.owner = $6
               AND t.state IN ('claimed', 'executing') AND t.lease_expires_at > clock_timestamp()) THEN 'busy'
         ELSE 'lost' END,
    coalesce(u.expires_at - statement_timestamp(), interval '0'),
    coalesce(u.expires_at >= u.hard_expires_at, false),
    u.expires_at
FROM v LEFT JOIN u ON u.namespace = v.ns AND u.key = v.key AND u.exec = v.exec`

// sqlHolder reads the current, unexpired holder of a lease.
const sqlHolder = `
SELECT owner, host, pid, token, acquired_at, expires_at, nullif(hard_expires_at, 'infinity')
FROM {{schema}}.leases
WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp()`

// sqlVerify checks that a lease token is current and locks the lease row
// (FOR SHARE) until the caller's transaction ends, so no takeover or release
// can commit before the caller's guarded writes do.
const sqlVerify = `
SELECT token, expires_at > clock_timestamp()
FROM {{schema}}.leases
WHERE namespace = $1 AND key = $2
FOR SHARE`

// sqlVerifyExecution is sqlVerify for the token of a running Once.
const sqlVerifyExecution = `
SELECT token, state IN ('claimed', 'executing') AND lease_expires_at > clock_timestamp()
FROM {{schema}}.executions
WHERE namespace = $1 AND key = $2
FOR SHARE`
