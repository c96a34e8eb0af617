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
