-- Sentinel schema, version 11: a lease release that runs only the write it
-- needs. {{schema}} is replaced by the quoted schema name.

-- lease_release ends lease (p_ns, p_key) held by p_owner at token p_token,
-- guarded by owner, token and expiry on the database clock, and, when a
-- caller waits for the key (leases.waiters > 0, see sqlAcquireWait), hands
-- it to the oldest live registration in lease_waiters. It is called only by
-- the release statement (sqlRelease in queries.go) and returns what that
-- statement returned when it was one statement with CTEs: the count of
-- leases it ended or handed over (0 or 1) and the wake-up to send after
-- the commit ('' for none; see wake.go). As one statement, every release
-- paid for setting up the hand-over's writes, which a release that nobody
-- waits for (the common case) does not need: that release is now one
-- UPDATE (docs/benchmarks.md, "A release nobody waits for").
--
--   1. Nobody waits: the row is ended (expires now) by one UPDATE guarded
--      by waiters = 0. A registration counted in concurrently
--      (sqlAcquireWait's cu, FOR NO KEY UPDATE) is waited for and the row
--      re-checked on its newest version (read committed), so a release
--      never ends a lease silently under a waiter counted in before the
--      release's write: that release goes on to 2.
--   2. Someone waits: the hand-over, as the one statement did it. lk locks
--      the row FOR UPDATE, SKIP LOCKED, when it is still this live lease
--      and someone waits: the lock that conflicts with VerifyToken's FOR
--      KEY SHARE, as an acquirer's takeover takes, so no grant to anyone
--      else commits while a guarded transaction of the holder is open (the
--      row is skipped then: 3). w/dw take the oldest registration
--      unexpired on the database clock (SKIP LOCKED: one being withdrawn is
--      passed over) and delete it; the UPDATE writes the grant for it: a
--      token minted here from p_seq (the schema's fencing_token sequence,
--      passed by the caller), expiries counted from clock_timestamp() with
--      the waiter's TTL and hard TTL, the waiter counted out,
--      granted_waiter naming it. The wake-up ('w') names the registration
--      and carries the grant: "<waiter>/<token>/<acquired µs>/<expires
--      µs>/<hard expiry µs or empty>", µs since the epoch
--      (Client.takeGrant; the same format as sqlReleaseSet's).
--   3. Otherwise (no live registration, or the row locked): the lease is
--      ended as in 1, and waiters are woken ('l') when some caller waits.
--
-- Each step re-checks its guard on the newest row version, so a lease that
-- expired, was taken over or was released meanwhile is left alone (0
-- returned). The row is kept, expired, rather than deleted: the next grant
-- of the key takes it over and mints its token under the row lock, so no
-- grant carries a token minted before an earlier grant of the same key.
-- VOLATILE plpgsql: each statement takes its own snapshot, and its plan is
-- cached per session.
CREATE OR REPLACE FUNCTION {{schema}}.lease_release(p_ns text, p_key text, p_owner text, p_token bigint, p_seq regclass,
    OUT n bigint, OUT wake text)
LANGUAGE plpgsql VOLATILE AS $lease_release$
BEGIN
    n := 0;
    wake := '';
    UPDATE {{schema}}.leases t SET expires_at = pg_catalog.clock_timestamp()
    WHERE t.namespace = p_ns AND t.key = p_key AND t.owner = p_owner AND t.token = p_token
      AND t.expires_at > pg_catalog.clock_timestamp() AND t.waiters = 0;
    IF FOUND THEN
        n := 1;
        RETURN;
    END IF;
    WITH lk AS (
        SELECT t.namespace, t.key FROM {{schema}}.leases t
        WHERE t.namespace = p_ns AND t.key = p_key AND t.owner = p_owner AND t.token = p_token
          AND t.expires_at > pg_catalog.clock_timestamp() AND t.waiters > 0
        FOR UPDATE SKIP LOCKED
    ),
    w AS (
        SELECT x.waiter FROM {{schema}}.lease_waiters x
        WHERE EXISTS (SELECT 1 FROM lk) AND x.namespace = p_ns AND x.key = p_key
          AND x.expires_at > pg_catalog.clock_timestamp()
        ORDER BY x.waiter LIMIT 1
        FOR UPDATE SKIP LOCKED
    ),
    dw AS (
        DELETE FROM {{schema}}.lease_waiters x USING w
        WHERE x.namespace = p_ns AND x.key = p_key AND x.waiter = w.waiter
        RETURNING x.waiter, x.owner, x.host, x.pid, x.ttl_us, x.hard_us
    )
    UPDATE {{schema}}.leases t SET
        owner = dw.owner, token = pg_catalog.nextval(p_seq), host = dw.host, pid = dw.pid,
        acquired_at = pg_catalog.clock_timestamp(), renewed_at = pg_catalog.clock_timestamp(),
        expires_at = pg_catalog.clock_timestamp() + dw.ttl_us * interval '1 microsecond',
        hard_expires_at = CASE WHEN dw.hard_us > 0 THEN pg_catalog.clock_timestamp() + dw.hard_us * interval '1 microsecond'
                          ELSE 'infinity'::timestamptz END,
        waiters = greatest(t.waiters - 1, 0), granted_waiter = dw.waiter
    FROM dw WHERE t.namespace = p_ns AND t.key = p_key
    RETURNING 'w' || pg_catalog.octet_length(t.namespace)::text || ':' || t.namespace || dw.waiter::text
        || '/' || t.token::text
        || '/' || (EXTRACT(EPOCH FROM t.acquired_at) * 1000000)::bigint::text
        || '/' || (EXTRACT(EPOCH FROM t.expires_at) * 1000000)::bigint::text
        || '/' || CASE WHEN t.hard_expires_at = 'infinity' THEN ''
                       ELSE (EXTRACT(EPOCH FROM t.hard_expires_at) * 1000000)::bigint::text END
    INTO wake;
    IF FOUND THEN
        n := 1;
        RETURN;
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
$lease_release$;
