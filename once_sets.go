package sentinel

// This file: the statements of Once for many calls at once (the coalescer's set forms of the claim, the read and the finish).

// sqlClaimSet is sqlClaim for many calls in one statement, for the
// coalescer (coalesce.go): parameter $k is the array of sqlClaim's $k over
// the batch's calls. Each call is decided exactly as sqlClaim and
// once_claim (migration 9; since migration 19 a takeover starts the key's
// count of waiters again) decide it, in the same steps written over the
// batch's rows (a batch pays for setting up its writes once, for up to 32
// calls), and gets its own row in sqlClaim's layout (scanClaim): the row it
// claimed packed as once_claim_packed packs it, or NULL and the key's row
// as it is (a replay, a key in progress...). Calls may share a
// key (replays of one key share the batch's probe); of the calls on one
// key only the first (by ordinal) may take it over or insert it, and the
// others get the row as it was, or no row (a key inserted by this very
// statement), as sqlClaim's caller would after a concurrent claim. A
// re-run goes to the first call that may make it (its WithRerun bound and
// approved token), as the row read before the lock shows it: not to a
// call that may not, which left the others "in progress". Rows
// are locked and inserted in key order. It returns, per call, its ordinal
// in the batch then sqlClaim's columns. $6 pid, $10 and $11 are bigint[];
// $9 metadata a text[] of JSON.
//
// A call's own arguments are read back by its ordinal, as $k[ord], and an
// inserted row's ordinal is found with array_position over the batch's
// "<octet length of namespace>:<namespace><key>" (unambiguous for any
// text): never by joining a CTE's rows back to i. sqlSetPlan turns hash and
// merge joins off, so each such join was a nested loop over the batch, its
// cost growing with the square of the batch's size: at 32 fresh keys the
// statement ran 1.49 against 2.14 ms with them (one connection, its commit
// not waited for), and 64 callers on a pool of 8 made 17-20 % more
// payments a second (docs/benchmarks-history.md, "Set statements without
// joins back to their arguments"). sqlFinishSet, sqlAcquireSet and
// sqlReleaseSet are written the same way.
const sqlClaimSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::text[]), pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::bigint[]),
        pg_catalog.unnest($7::bigint[]), pg_catalog.unnest($8::bigint[]), pg_catalog.unnest($9::text[]),
        pg_catalog.unnest($10::bigint[]), pg_catalog.unnest($11::bigint[]))
        WITH ORDINALITY AS i(ns, key, state, owner, host, pid, ttl, hard, meta, rerun, rtoken, n)
),
cur AS (
    SELECT i.n AS ord, {{cols}} FROM i JOIN {{schema}}.executions t ON t.namespace = i.ns AND t.key = i.key
),
lk AS (
    SELECT o.n AS ord, l.* FROM (
        SELECT DISTINCT ON (c.namespace, c.key) c.ord AS n, c.namespace AS ns, c.key,
            ($10::bigint[])[c.ord] AS rerun, ($11::bigint[])[c.ord] AS rtoken
        FROM cur c
        WHERE NOT c.lease_alive AND (c.state = 'claimed' OR (c.state = 'executing' AND ($10::bigint[])[c.ord] > 1
            AND ($11::bigint[])[c.ord] >= 0 AND c.attempt < least(c.max_attempts, ($10::bigint[])[c.ord])
            AND (($11::bigint[])[c.ord] = 0 OR c.token = ($11::bigint[])[c.ord])))
        ORDER BY c.namespace, c.key, c.ord
    ) o
    CROSS JOIN LATERAL (
        SELECT t.namespace, t.key, t.state, t.token, t.owner, t.attempt, t.max_attempts FROM {{schema}}.executions t
        WHERE t.namespace = o.ns AND t.key = o.key AND t.lease_expires_at <= pg_catalog.clock_timestamp()
            AND (t.state = 'claimed' OR (t.state = 'executing' AND t.attempt < least(t.max_attempts, o.rerun)
                AND (o.rtoken = 0 OR t.token = o.rtoken)))
        FOR UPDATE OF t SKIP LOCKED
    ) l
),
up AS (
    UPDATE {{schema}}.executions t SET
        state = ($3::text[])[lk.ord], owner = ($4::text[])[lk.ord], token = pg_catalog.nextval({{seq}}),
        host = ($5::text[])[lk.ord], pid = (($6::bigint[])[lk.ord])::int,
        updated_at = pg_catalog.clock_timestamp(),
        lease_expires_at = pg_catalog.clock_timestamp() + ($7::bigint[])[lk.ord] * interval '1 microsecond',
        hard_expires_at = pg_catalog.clock_timestamp() + ($8::bigint[])[lk.ord] * interval '1 microsecond',
        completed_at = NULL, result = NULL, result_error = NULL, final_error = NULL, result_by_operator = false,
        attempt = CASE WHEN lk.state = 'executing' THEN lk.attempt + 1 ELSE 1 END,
        max_attempts = CASE WHEN lk.state = 'executing' THEN least(lk.max_attempts, ($10::bigint[])[lk.ord])::int
            ELSE (($10::bigint[])[lk.ord])::int END,
        waiters = 0
    FROM lk
    WHERE t.namespace = lk.namespace AND t.key = lk.key
    RETURNING lk.ord, {{cols}}, lk.state AS prev_state, lk.token AS prev_token, lk.owner AS prev_owner
),
ins AS (
    INSERT INTO {{schema}}.executions AS t
        (namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at,
         attempt, max_attempts)
    SELECT DISTINCT ON (i.ns, i.key) i.ns, i.key, i.state, i.owner, pg_catalog.nextval({{seq}}), i.host, i.pid::int,
        pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
        pg_catalog.clock_timestamp() + i.ttl * interval '1 microsecond',
        pg_catalog.clock_timestamp() + i.hard * interval '1 microsecond',
        1, i.rerun::int
    FROM i
    WHERE i.n <> ALL (coalesce((SELECT pg_catalog.array_agg(c.ord) FROM cur c), '{}'::bigint[]))
    ORDER BY i.ns, i.key, i.n
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING {{cols}}
),
ik AS (
    SELECT pg_catalog.array_agg(pg_catalog.octet_length(i.ns)::text || ':' || i.ns || i.key ORDER BY i.n) AS k FROM i
),
g AS (
    SELECT * FROM up
    UNION ALL
    SELECT pg_catalog.array_position((SELECT ik.k FROM ik), pg_catalog.octet_length(ins.namespace)::text || ':' || ins.namespace || ins.key)::bigint, ins.*,
        NULL::text, NULL::bigint, NULL::text
    FROM ins
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT g.namespace, g.key, e.event, e.state, g.token, g.owner,
        CASE WHEN e.n = 0 THEN coalesce((($9::text[])[g.ord])::jsonb, '{}'::jsonb) || pg_catalog.jsonb_build_object('attempt', g.attempt,
            'max_attempts', g.max_attempts, 'previous_token', g.prev_token, 'previous_owner', g.prev_owner)
        ELSE (($9::text[])[g.ord])::jsonb END
    FROM g, (VALUES (0, 'rerun', 'executing'), (1, 'claimed', 'claimed'), (2, 'started', 'executing')) AS e(n, event, state)
    WHERE (e.n = 0 AND g.prev_state = 'executing') OR e.n = 1 OR (e.n = 2 AND ($3::text[])[g.ord] = 'executing')
    ORDER BY g.ord, e.n
)
SELECT g.ord, ARRAY[g.token, g.attempt::bigint, g.max_attempts::bigint,
        (EXTRACT(EPOCH FROM g.created_at) * 1000000)::bigint, (EXTRACT(EPOCH FROM g.updated_at) * 1000000)::bigint,
        (EXTRACT(EPOCH FROM g.lease_expires_at) * 1000000)::bigint, (EXTRACT(EPOCH FROM g.hard_expires_at) * 1000000)::bigint,
        CASE WHEN g.lease_alive THEN 1 ELSE 0 END, (EXTRACT(EPOCH FROM g.lease_left) * 1000000)::bigint],
    {{gcols}} FROM g
UNION ALL
SELECT c.ord, NULL::bigint[], {{ccols}} FROM cur c WHERE NOT EXISTS (SELECT 1 FROM g WHERE g.ord = c.ord)`

// sqlFinishSet is sqlFinish for many claims in one statement, for the
// coalescer (coalesce.go): parameter $k is the array of sqlFinish's $k
// over the batch's calls, all on distinct keys, except $8, where each
// call's states are joined by commas. Each row is guarded exactly as
// sqlFinish guards it. It returns, per call, its ordinal in the batch,
// the count of rows changed (0 or 1) and whether callers wait for the key
// (Once's sqlFinish: they are woken after the commit; no NOTIFY here).
const sqlFinishSet = `
WITH i AS (
    SELECT * FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[]),
        pg_catalog.unnest($4::bigint[]), pg_catalog.unnest($5::text[]), pg_catalog.unnest($6::bytea[]),
        pg_catalog.unnest($7::text[]), pg_catalog.unnest($8::text[]), pg_catalog.unnest($9::bool[]),
        pg_catalog.unnest($10::text[]), pg_catalog.unnest($11::text[]), pg_catalog.unnest($12::text[]))
        WITH ORDINALITY AS i(ns, key, owner, token, to_state, result, result_error, from_states, need_live, event, meta, final_error, n)
),
u AS (
    UPDATE {{schema}}.executions t SET
        state = i.to_state,
        result = CASE WHEN i.to_state = 'completed' THEN i.result ELSE t.result END,
        result_error = CASE WHEN i.to_state = 'completed' THEN i.result_error ELSE t.result_error END,
        final_error = CASE WHEN i.to_state = 'completed' THEN i.final_error ELSE t.final_error END,
        result_by_operator = CASE WHEN i.to_state = 'completed' THEN false ELSE t.result_by_operator END,
        completed_at = CASE WHEN i.to_state = 'completed' THEN pg_catalog.statement_timestamp() ELSE t.completed_at END,
        lease_expires_at = CASE WHEN i.to_state = 'completed' THEN NULL ELSE least(t.lease_expires_at, pg_catalog.statement_timestamp()) END,
        updated_at = pg_catalog.statement_timestamp()
    FROM i
    WHERE t.namespace = i.ns AND t.key = i.key AND t.owner = i.owner AND t.token = i.token
      AND t.state = ANY(pg_catalog.string_to_array(i.from_states, ','))
      AND (NOT i.need_live OR t.lease_expires_at > pg_catalog.clock_timestamp())
    RETURNING i.n AS ord, t.token, t.state, t.waiters > 0 AS waited
),
ev AS (
    INSERT INTO {{schema}}.events (namespace, key, event, state, token, owner, metadata)
    SELECT ($1::text[])[u.ord], ($2::text[])[u.ord], ($10::text[])[u.ord], u.state, u.token, ($3::text[])[u.ord],
        (($11::text[])[u.ord])::jsonb
    FROM u
    ORDER BY u.ord
)
SELECT u.ord, 1::bigint, u.waited FROM u
UNION ALL
SELECT i.n, 0::bigint, false FROM i WHERE i.n <> ALL (coalesce((SELECT pg_catalog.array_agg(u.ord) FROM u), '{}'::bigint[]))`

// sqlReadSet is sqlReadExecution for many keys in one statement, for the
// coalescer (coalesce.go): per call, its ordinal in the batch then
// sqlReadExecution's columns; no row for a key without one.
// $1 namespaces, $2 keys.
const sqlReadSet = `
SELECT i.n, {{cols}}
FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) WITH ORDINALITY AS i(ns, key, n)
JOIN {{schema}}.executions t ON t.namespace = i.ns AND t.key = i.key`
