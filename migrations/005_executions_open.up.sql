-- Executions an operator looks at (claimed, executing, reconciling), for
-- Client.Executions. Partial: completed executions, the bulk of the table,
-- are not in it, so it stays small and a fresh Once pays one small index
-- insert (at its claim) for it.
--
-- It leads with (namespace, key), like the primary key: the claim's lookup
-- of a claimed row (state = 'claimed' implies this index's predicate) may
-- use it, and must then find its one key at once. An index leading with
-- updated_at made that lookup scan every entry, dead ones included, and
-- a fresh Once on a table of 1M completed rows 1.59x slower.
CREATE INDEX IF NOT EXISTS executions_open_idx
    ON {{schema}}.executions (namespace, key, updated_at) WHERE state <> 'completed';
