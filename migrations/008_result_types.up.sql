-- Sentinel schema: declared result types, and who stored a key's result.
-- {{schema}} is replaced by the quoted schema name.

-- The result type of a key space, declared by the application
-- (sentinel.RegisterResultType): the keys of namespace that start with
-- prefix hold values of the Go type type_name, whose JSON Schema (draft
-- 2020-12, reflected from the type) is schema. The operator tools (the
-- sentinel command, the console, ForceComplete and SetResult) check an
-- operator's value against the schema of the longest matching prefix
-- before they store it. json, not jsonb: the schema is shown to operators
-- with its properties in the type's field order.
CREATE TABLE IF NOT EXISTS {{schema}}.result_types (
    namespace     text        NOT NULL,
    prefix        text        NOT NULL,
    type_name     text        NOT NULL,
    schema        json        NOT NULL,
    registered_by text        NOT NULL DEFAULT '',
    registered_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (namespace, prefix)
);

-- True when an operator stored the result (ForceComplete, SetResult), false
-- when fn did. An operator's value is replayed strictly: a value that does
-- not decode into the caller's type without unknown or missing fields is an
-- error for the caller, never a zero value. Every statement that completes
-- a key sets it. A constant default rewrites nothing.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS result_by_operator boolean NOT NULL DEFAULT false;
