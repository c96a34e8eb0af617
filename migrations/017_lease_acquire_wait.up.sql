-- Sentinel schema, version 17: a waiting acquirer's attempt as a function
-- that runs only the writes its case needs. {{schema}} is replaced by the
-- quoted schema name.

-- A Lease(WithWait) attempt (sqlAcquireWait in queries.go) was one
-- statement of nine CTEs: take the key if its lease expired (or by
-- force), insert it if missing, else count the caller in as a waiter and
-- register it, withdraw an earlier registration on a grant, and say what
-- it found. Every attempt set all of them up and ran each, whichever
-- applied: with the server's log_statement_stats on one holder/waiter pair,
-- 52 µs to bind and 158 µs to run, the largest part of a handover's server
-- CPU (docs/benchmarks.md, "Machine J"). This function reads the row
-- first and runs only the branch it calls for, each a plain statement
-- with a cached plan. Same arguments, same locks and guards, same result:
--
--   - A row that is missing is inserted (ON CONFLICT DO NOTHING: one
--     inserted concurrently is its inserter's).
--   - A row expired on the database clock (or any row, by force) is
--     locked FOR UPDATE SKIP LOCKED, re-checked under the lock, and taken
--     with a new token; the caller's earlier registration is withdrawn
--     and counted out (only under the epoch it was made in).
--   - Otherwise, for a caller that registers, the row is locked FOR NO KEY
--     UPDATE SKIP LOCKED, its waiters counted up, the registration
--     inserted; live says whether the lease was still live once locked (a
--     release that committed meanwhile reads as not live: re-check at
--     once). A row locked by another transaction registers nothing.
--   - A statement that grants nothing commits without waiting for its
--     WAL flush (synchronous_commit off for the transaction), as before.
--
-- o_acquired is NULL when the row could not be read (gone meanwhile): the
-- client's statement then returns no row, as the CTE's did.
CREATE OR REPLACE FUNCTION {{schema}}.lease_acquire_wait(p_ns text, p_key text, p_owner text, p_host text, p_pid integer,
    p_ttl bigint, p_hard bigint, p_force boolean, p_leaving integer, p_register boolean, p_reg bigint, p_channel text,
    p_epoch timestamptz, p_seq regclass,
    OUT o_acquired boolean, OUT o_owner text, OUT o_host text, OUT o_pid integer, OUT o_token bigint,
    OUT o_acquired_at timestamptz, OUT o_expires_at timestamptz, OUT o_hard timestamptz, OUT o_remaining interval,
    OUT o_live boolean, OUT o_waiter bigint, OUT o_left interval, OUT o_epoch timestamptz, OUT o_until timestamptz)
LANGUAGE plpgsql VOLATILE AS $lease_acquire_wait$
DECLARE
    v_take boolean;
    r {{schema}}.leases;
BEGIN
    o_epoch := coalesce(pg_catalog.pg_stat_get_bgwriter_stat_reset_time(), pg_catalog.pg_postmaster_start_time());
    SELECT t.expires_at <= pg_catalog.clock_timestamp() OR p_force INTO v_take
    FROM {{schema}}.leases t WHERE t.namespace = p_ns AND t.key = p_key;
    IF NOT FOUND THEN
        INSERT INTO {{schema}}.leases AS t
            (namespace, key, owner, token, host, pid, acquired_at, renewed_at, expires_at, hard_expires_at)
        VALUES (p_ns, p_key, p_owner, pg_catalog.nextval(p_seq), p_host, p_pid,
            pg_catalog.clock_timestamp(), pg_catalog.clock_timestamp(),
            pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond',
            CASE WHEN p_hard > 0 THEN pg_catalog.clock_timestamp() + p_hard * interval '1 microsecond'
                 ELSE 'infinity'::timestamptz END)
        ON CONFLICT (namespace, key) DO NOTHING
        RETURNING t.* INTO r;
    ELSIF v_take THEN
        PERFORM 1 FROM {{schema}}.leases t
        WHERE t.namespace = p_ns AND t.key = p_key AND (t.expires_at <= pg_catalog.clock_timestamp() OR p_force)
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE {{schema}}.leases t SET
                owner = p_owner, token = pg_catalog.nextval(p_seq), host = p_host, pid = p_pid,
                acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
                expires_at = pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond',
                hard_expires_at = CASE WHEN p_hard > 0 THEN pg_catalog.clock_timestamp() + p_hard * interval '1 microsecond'
                                  ELSE 'infinity'::timestamptz END,
                waiters = greatest(t.waiters - CASE WHEN o_epoch = p_epoch THEN p_leaving ELSE 0 END, 0),
                granted_waiter = NULL
            WHERE t.namespace = p_ns AND t.key = p_key
            RETURNING t.* INTO r;
        END IF;
    END IF;
    IF r.token IS NOT NULL THEN
        IF p_reg > 0 AND o_epoch = p_epoch THEN
            DELETE FROM {{schema}}.lease_waiters x WHERE x.namespace = p_ns AND x.key = p_key AND x.waiter = p_reg;
        END IF;
        o_acquired := true;
        o_owner := r.owner;
        o_host := r.host;
        o_pid := r.pid;
        o_token := r.token;
        o_acquired_at := r.acquired_at;
        o_expires_at := r.expires_at;
        o_hard := nullif(r.hard_expires_at, 'infinity');
        o_remaining := r.expires_at - pg_catalog.statement_timestamp();
        o_live := true;
        o_waiter := 0;
        o_left := interval '0';
        o_until := 'epoch'::timestamptz;
        RETURN;
    END IF;
    IF p_register THEN
        PERFORM 1 FROM {{schema}}.leases t WHERE t.namespace = p_ns AND t.key = p_key FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            UPDATE {{schema}}.leases t SET waiters = t.waiters + 1
            WHERE t.namespace = p_ns AND t.key = p_key
            RETURNING t.expires_at > pg_catalog.clock_timestamp() INTO o_live;
            INSERT INTO {{schema}}.lease_waiters AS x
                (namespace, key, waiter, owner, host, pid, ttl_us, hard_us, expires_at, channel)
            VALUES (p_ns, p_key, pg_catalog.nextval(p_seq), p_owner, p_host, p_pid, p_ttl, p_hard,
                pg_catalog.clock_timestamp() + p_ttl * interval '1 microsecond', nullif(p_channel, ''))
            RETURNING x.waiter, x.expires_at - pg_catalog.clock_timestamp(), x.expires_at INTO o_waiter, o_left, o_until;
        END IF;
    END IF;
    PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
    SELECT false, t.owner, t.host, t.pid, t.token, t.acquired_at, t.expires_at, nullif(t.hard_expires_at, 'infinity'),
        t.expires_at - pg_catalog.clock_timestamp()
    INTO o_acquired, o_owner, o_host, o_pid, o_token, o_acquired_at, o_expires_at, o_hard, o_remaining
    FROM {{schema}}.leases t WHERE t.namespace = p_ns AND t.key = p_key;
    o_live := coalesce(o_live, true);
    o_waiter := coalesce(o_waiter, 0);
    o_left := coalesce(o_left, interval '0');
    o_until := coalesce(o_until, 'epoch'::timestamptz);
END
$lease_acquire_wait$;
