-- Sentinel schema, version 3: leader election.
-- {{schema}} is replaced by the quoted schema name.

-- One row per election group: its leadership lease. It lives in its own
-- table, so no group name can ever collide with a lease key. term is the
-- grant's fencing token, minted from the fencing_token sequence by the
-- statement that writes the grant. Rows are kept after a resignation
-- (expired), like leases, so every later election goes through the row lock.
CREATE TABLE IF NOT EXISTS {{schema}}.leaders (
    namespace   text        NOT NULL,
    election    text        NOT NULL,
    owner       text        NOT NULL,
    term        bigint      NOT NULL,
    host        text        NOT NULL DEFAULT '',
    pid         integer     NOT NULL DEFAULT 0,
    app_version text        NOT NULL DEFAULT '',
    elected_at  timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, election)
);

-- One row per running elector. token is minted from fencing_token when the
-- row is written, so the heartbeat can tell this run's row from an older
-- one. Rows of dead electors drop out of Members by expiry.
CREATE TABLE IF NOT EXISTS {{schema}}.members (
    namespace   text        NOT NULL,
    election    text        NOT NULL,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    host        text        NOT NULL DEFAULT '',
    pid         integer     NOT NULL DEFAULT 0,
    app_version text        NOT NULL DEFAULT '',
    started_at  timestamptz NOT NULL,
    last_poll   timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (namespace, election, owner)
);
