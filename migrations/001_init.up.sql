-- Sentinel schema, version 1: leases, executions and their event history.
-- {{schema}} is replaced by the quoted schema name (default "sentinel").

CREATE SCHEMA IF NOT EXISTS {{schema}};

-- Fencing tokens. Never cycles; a value is minted only by a statement that
-- also writes the grant it belongs to.
CREATE SEQUENCE IF NOT EXISTS {{schema}}.fencing_token AS bigint NO CYCLE;

-- One row per key ever leased: held, or expired/released and waiting to be
-- taken over (rows are kept so that every grant mints its token under the
-- row lock; Prune removes long-expired ones).
CREATE TABLE IF NOT EXISTS {{schema}}.leases (
    namespace       text        NOT NULL,
    key             text        NOT NULL,
    owner           text        NOT NULL,
    token           bigint      NOT NULL,
    host            text        NOT NULL DEFAULT '',
    pid             integer     NOT NULL DEFAULT 0,
    acquired_at     timestamptz NOT NULL,
    renewed_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    hard_expires_at timestamptz NOT NULL,
    PRIMARY KEY (namespace, key)
);

-- One row per Once key.
CREATE TABLE IF NOT EXISTS {{schema}}.executions (
    namespace        text        NOT NULL,
    key              text        NOT NULL,
    state            text        NOT NULL CHECK (state IN ('claimed', 'executing', 'completed', 'reconciling')),
    owner            text        NOT NULL,
    token            bigint      NOT NULL,
    host             text        NOT NULL DEFAULT '',
    pid              integer     NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    lease_expires_at timestamptz,
    hard_expires_at  timestamptz,
    completed_at     timestamptz,
    result           bytea,
    result_error     text,
    PRIMARY KEY (namespace, key)
);

CREATE INDEX IF NOT EXISTS executions_completed_at_idx
    ON {{schema}}.executions (completed_at) WHERE state = 'completed';

-- Append-only history of execution transitions.
CREATE TABLE IF NOT EXISTS {{schema}}.events (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace text        NOT NULL,
    key       text        NOT NULL,
    event     text        NOT NULL,
    state     text        NOT NULL,
    token     bigint      NOT NULL,
    owner     text        NOT NULL,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    metadata  jsonb
);

CREATE INDEX IF NOT EXISTS events_key_idx ON {{schema}}.events (namespace, key, id);
CREATE INDEX IF NOT EXISTS events_at_idx ON {{schema}}.events (at);
