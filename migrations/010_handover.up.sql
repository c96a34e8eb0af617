-- Sentinel schema, version 10: handing a term over on resignation.
-- {{schema}} is replaced by the quoted schema name.

-- A follower that registers as waiting for the group's hand-off
-- (sqlElectionWait) also names itself as the successor: its owner, its
-- member token (the running elector, not just the Owner string), host,
-- pid, app version and TTL. A resignation (sqlResign) then grants the next
-- term to that successor in the same statement, when its registration and
-- its member row are still live on the database clock, so the successor
-- only reads its grant when it wakes: one commit per handover instead of
-- two. term_member records which member a term was granted to that way
-- (NULL for a term taken by a campaign). Nullable columns without a
-- default rewrite nothing.
ALTER TABLE {{schema}}.leaders
    ADD COLUMN IF NOT EXISTS next_owner       text,
    ADD COLUMN IF NOT EXISTS next_member      bigint,
    ADD COLUMN IF NOT EXISTS next_host        text,
    ADD COLUMN IF NOT EXISTS next_pid         integer,
    ADD COLUMN IF NOT EXISTS next_app_version text,
    ADD COLUMN IF NOT EXISTS next_ttl_us      bigint,
    ADD COLUMN IF NOT EXISTS term_member      bigint;

-- Callers waiting for a lease key (Lease with WithWait) register here, in
-- the statement that counts them in leases.waiters, with what a grant to
-- them needs (owner, host, pid, TTL, hard TTL). waiter is minted from
-- fencing_token, so registrations are ordered by arrival. A release hands
-- the lease to the oldest live registration in its own statement (see
-- sqlRelease), deleting it, and records it in leases.granted_waiter; the
-- waiter only reads its grant when it wakes. A registration lives for the
-- waiter's TTL and is renewed while it waits: one left by a waiter that
-- died is skipped once expired.
CREATE TABLE IF NOT EXISTS {{schema}}.lease_waiters (
    namespace  text        NOT NULL,
    key        text        NOT NULL,
    waiter     bigint      NOT NULL,
    owner      text        NOT NULL,
    host       text        NOT NULL DEFAULT '',
    pid        integer     NOT NULL DEFAULT 0,
    ttl_us     bigint      NOT NULL,
    hard_us    bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key, waiter)
);

ALTER TABLE {{schema}}.leases ADD COLUMN IF NOT EXISTS granted_waiter bigint;
