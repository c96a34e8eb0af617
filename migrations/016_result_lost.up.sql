-- Sentinel schema, version 16: the completed keys whose result was not
-- stored, for an operator. {{schema}} is replaced by the quoted schema name.

-- A key completes without its result when fn's value cannot be encoded
-- (result_error): every caller then gets ErrResult until an operator
-- stores the value (SetResult). Such keys need an operator as uncertain
-- ones do, but they are completed, and executions_open_idx leaves
-- completed rows out: listing them (ExecutionFilter.ResultLost, the
-- console's "Needs an operator") read every completed row. This partial
-- index holds only them (none in a healthy table), so the listing reads
-- what it returns, and a fresh Once, whose rows have no result_error,
-- pays nothing for it but the predicate's test. A client of an earlier
-- version neither needs nor uses it; one of this version without it
-- still lists such keys, by a scan.
CREATE INDEX IF NOT EXISTS executions_result_lost_idx
    ON {{schema}}.executions (namespace, key) WHERE result_error IS NOT NULL;
