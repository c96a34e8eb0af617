-- Sentinel schema, version 18: a release that hands a lease to its waiter
-- runs as plain statements, one per step. {{schema}} is replaced by the
-- quoted schema name.

-- lease_release_to (migration 14; migration 11 says what it does and why)
-- ran its hand-over as one statement of three CTEs (lock the row, pick
-- and delete the oldest live registration, write the grant). With the
-- server's log_statement_stats on one holder/waiter pair, the release that
-- grants cost 25 µs to bind and 156 µs to run, the largest part of a
-- handover's server CPU after the registration (docs/benchmarks.md,
-- "Machine J"). The hand-over now runs as the steps themselves, each a
-- plain statement with a cached plan; same arguments, locks, guards,
-- order and result:
--
--   1. Nobody waits: one UPDATE guarded by waiters = 0, as before.
--   2. Someone waits: the row is locked FOR UPDATE SKIP LOCKED when it is
--      still this live lease and someone waits (the lock that conflicts
--      with VerifyToken's FOR KEY SHARE; a row locked by a guarded
--      transaction is skipped: 3). The oldest registration unexpired on
--      the database clock is locked FOR UPDATE SKIP LOCKED (one being
--      withdrawn is passed over), deleted, and the grant written for it
--      under the row lock taken first. No live registration: 3.
--   3. The lease is ended as in 1, guarded as before, and waiters are
--      woken ('l') when some caller waits.
CREATE OR REPLACE FUNCTION {{schema}}.lease_release_to(p_ns text, p_key text, p_owner text, p_token bigint, p_seq regclass,
    OUT n bigint, OUT wake text, OUT channel text)
LANGUAGE plpgsql VOLATILE AS $lease_release_to$
DECLARE
    v_waiter bigint;
    v_owner text;
    v_host text;
    v_pid integer;
    v_ttl bigint;
    v_hard bigint;
    v_channel text;
BEGIN
    n := 0;
    wake := '';
    channel := '';
    UPDATE {{schema}}.leases t SET expires_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = p_ns AND t.key = p_key AND t.owner = p_owner AND t.token = p_token
      AND t.expires_at > pg_catalog.clock_timestamp() AND t.waiters = 0;
    IF FOUND THEN
        n := 1;
        RETURN;
    END IF;
    PERFORM 1 FROM {{schema}}.leases t
    WHERE t.namespace = p_ns AND t.key = p_key AND t.owner = p_owner AND t.token = p_token
      AND t.expires_at > pg_catalog.clock_timestamp() AND t.waiters > 0
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        SELECT x.waiter, x.owner, x.host, x.pid, x.ttl_us, x.hard_us, x.channel
        INTO v_waiter, v_owner, v_host, v_pid, v_ttl, v_hard, v_channel
        FROM {{schema}}.lease_waiters x
        WHERE x.namespace = p_ns AND x.key = p_key AND x.expires_at > pg_catalog.clock_timestamp()
        ORDER BY x.waiter LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            DELETE FROM {{schema}}.lease_waiters x
            WHERE x.namespace = p_ns AND x.key = p_key AND x.waiter = v_waiter;
            UPDATE {{schema}}.leases t SET
                owner = v_owner, token = pg_catalog.nextval(p_seq), host = v_host, pid = v_pid,
                acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
                expires_at = pg_catalog.clock_timestamp() + v_ttl * interval '1 microsecond',
                hard_expires_at = CASE WHEN v_hard > 0 THEN pg_catalog.clock_timestamp() + v_hard * interval '1 microsecond'
                                  ELSE 'infinity'::timestamptz END,
                waiters = greatest(t.waiters - 1, 0), granted_waiter = v_waiter
            WHERE t.namespace = p_ns AND t.key = p_key
            RETURNING 'w' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || v_waiter::text
                || '/' || t.token::text
                || '/' || (EXTRACT(EPOCH FROM t.acquired_at) * 1000000)::bigint::text
                || '/' || (EXTRACT(EPOCH FROM t.expires_at) * 1000000)::bigint::text
                || '/' || CASE WHEN t.hard_expires_at = 'infinity' THEN ''
                               ELSE (EXTRACT(EPOCH FROM t.hard_expires_at) * 1000000)::bigint::text END
            INTO wake;
            channel := coalesce(v_channel, '');
            n := 1;
            RETURN;
        END IF;
    END IF;
    UPDATE {{schema}}.leases t SET expires_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = p_ns AND t.key = p_key AND t.owner = p_owner AND t.token = p_token
      AND t.expires_at > pg_catalog.clock_timestamp()
    RETURNING CASE WHEN t.waiters > 0 THEN 'l' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || t.key
                   ELSE '' END
    INTO wake;
    IF FOUND THEN
        n := 1;
    ELSE
        wake := '';
    END IF;
END
$lease_release_to$;
