-- Sentinel schema, version 14: a handover's wake-up sent to its waiter's
-- process only. {{schema}} is replaced by the quoted schema name.

-- Every process's LISTEN connection (listenhub.go) listened on the
-- schema's one channel, so the wake-up of a lease handed to one waiter
-- reached every process that waits for anything in the schema, and each
-- forwarded it to its client, which parsed and dropped it. A process's
-- hub now also listens on a channel of its own, and a waiter records it
-- with its registration: a release that hands the lease to it wakes that
-- process only (lease_release_to returns the channel with the wake-up;
-- the client's sender notifies on it, wake.go). PostgreSQL (up to 18 at
-- least) still signals every listening backend of the database, but the
-- others no longer send the notification to their clients.
--
-- A registration made by an older client has no channel (NULL): its
-- wake-up goes to the schema's channel, as before, where every hub still
-- listens. An older client's release calls lease_release, now the same
-- function without the channel: it sends every wake-up to the schema's
-- channel, which the hubs of newer clients hear too. So clients of both
-- versions wake each other during a rolling upgrade.
ALTER TABLE {{schema}}.lease_waiters ADD COLUMN IF NOT EXISTS channel text;

-- The same for a queue's tickets: a ticket's draw records its process's
-- channel, and the leave ahead of it wakes that process only
-- (sqlTicketLeaveWake in queue_sql.go); a ticket drawn by an older client
-- is woken on the schema's channel.
ALTER TABLE {{schema}}.tickets ADD COLUMN IF NOT EXISTS channel text;

-- And for an election: the follower that names itself successor records
-- its process's channel with it (next_channel, sqlElectionWait), and a
-- resignation that hands it the term keeps it with the term
-- (term_channel, sqlResign), where the resignation's wake-up reads it
-- (sqlResignWake).
-- An older elector naming itself successor leaves next_channel as it was
-- (its statement does not know the column): the term's 'h' then goes to
-- the channel of the successor named before it, and the older elector,
-- registered as waiting, is woken by the followers' 'g' on the schema's
-- channel and reads its grant, as an older elector always did.
ALTER TABLE {{schema}}.leaders ADD COLUMN IF NOT EXISTS next_channel text;
ALTER TABLE {{schema}}.leaders ADD COLUMN IF NOT EXISTS term_channel text;

-- lease_release_to is lease_release (migration 11, whose comment says
-- what it does and why), returning also the channel of the process whose
-- registration it granted ('' for none: the schema's channel).
CREATE OR REPLACE FUNCTION {{schema}}.lease_release_to(p_ns text, p_key text, p_owner text, p_token bigint, p_seq regclass,
    OUT n bigint, OUT wake text, OUT channel text)
LANGUAGE plpgsql VOLATILE AS $lease_release_to$
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
        RETURNING x.waiter, x.owner, x.host, x.pid, x.ttl_us, x.hard_us, x.channel
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
                       ELSE (EXTRACT(EPOCH FROM t.hard_expires_at) * 1000000)::bigint::text END,
        coalesce(dw.channel, '')
    INTO wake, channel;
    IF FOUND THEN
        n := 1;
        RETURN;
    END IF;
    channel := ''; -- the INTO above found no row and cleared it
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

-- lease_release, for clients older than version 14: the same release, its
-- wake-up for the schema's channel.
CREATE OR REPLACE FUNCTION {{schema}}.lease_release(p_ns text, p_key text, p_owner text, p_token bigint, p_seq regclass,
    OUT n bigint, OUT wake text)
LANGUAGE sql VOLATILE AS $lease_release$
    SELECT r.n, r.wake FROM {{schema}}.lease_release_to(p_ns, p_key, p_owner, p_token, p_seq) AS r
$lease_release$;
