package main

// Copies of the statements the library sends, for the floor: the same SQL
// issued by hand with pgx. They are checked against what the library really
// sends at run time (see sqlCheck), so a change in the library shows up in
// the report instead of silently skewing the floor.

const (
	floorExecCols = `t.namespace, t.key, t.state, t.owner, t.host, t.pid, t.token, t.created_at, t.updated_at,
    t.lease_expires_at, t.hard_expires_at, t.completed_at, t.result, t.result_error, t.final_error, t.result_by_operator,
    coalesce(t.lease_expires_at > pg_catalog.clock_timestamp(), false) AS lease_alive,
    coalesce(t.lease_expires_at - pg_catalog.statement_timestamp(), interval '0') AS lease_left,
    t.attempt, t.max_attempts`
	floorExecColsOf = `g.namespace, g.key, g.state, g.owner, g.host, g.pid, g.token, g.created_at, g.updated_at,
    g.lease_expires_at, g.hard_expires_at, g.completed_at, g.result, g.result_error, g.final_error, g.result_by_operator,
    g.lease_alive, g.lease_left, g.attempt, g.max_attempts`
	floorSQLReadExecution = `SELECT {{cols}} FROM {{schema}}.executions t WHERE t.namespace = $1 AND t.key = $2`
	floorSQLClaim         = `
SELECT CASE WHEN t.key IS NULL OR NOT (coalesce(t.lease_expires_at > pg_catalog.clock_timestamp(), false)
        OR NOT (t.state = 'claimed' OR (t.state = 'executing' AND $10::int > 1 AND $11::bigint >= 0)))
    THEN {{schema}}.once_claim_packed($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, {{seq}}, t.key IS NULL) END,
    {{cols}}
FROM (SELECT) AS one
LEFT JOIN {{schema}}.executions t ON t.namespace = $1 AND t.key = $2`
	floorSQLFinish = `
WITH u AS (
    UPDATE {{schema}}.executions t SET
        state = $5,
        result = CASE WHEN $5 = 'completed' THEN $6::bytea ELSE t.result END,
        result_error = CASE WHEN $5 = 'completed' THEN $7::text ELSE t.result_error END,
        final_error = CASE WHEN $5 = 'completed' THEN $12::text ELSE t.final_error END,
        result_by_operator = CASE WHEN $5 = 'completed' THEN false ELSE t.result_by_operator END,
        completed_at = CASE WHEN $5 = 'completed' THEN pg_catalog.statement_timestamp() ELSE t.completed_at END,
        lease_expires_at = CASE WHEN $5 = 'completed' THEN NULL ELSE least(t.lease_expires_at, pg_catalog.statement_timestamp()) END,
        updated_at = pg_catalog.statement_timestamp()
    WHERE t.namespace = $1 AND t.key = $2 AND t.owner = $3 AND t.token = $4
      AND t.state = ANY($8::text[]) AND (NOT $9::bool OR t.lease_expires_at > pg_catalog.clock_timestamp())
    RETURNING t.token, t.state, t.waiters > 0 AS waited
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT $1, $2, $10, u.state, u.token, $3, $11::jsonb FROM u
)
SELECT pg_catalog.count(*), coalesce(pg_catalog.bool_or(u.waited), false) FROM u`
	floorSQLAcquire = `
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
	floorSQLRelease = `SELECT r.n, r.wake, r.channel FROM {{schema}}.lease_release_to($1, $2, $3, $4, {{seq}}) AS r`
)
