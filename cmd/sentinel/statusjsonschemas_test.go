package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status names, on stderr, other schemas holding Sentinel's tables that
// it could not read for uncertain executions (an older version, no
// privilege), and says when there were more than the five it looks in:
// "uncertain_in_other_schemas" is then not the whole picture. status
// --json said neither: a script read a short or empty list as "nothing
// elsewhere". --json now carries both ("uncertain_other_schemas_unread",
// "more_other_schemas"), as the text does.
func TestStatusJSONSaysWhatOtherSchemasWereNotRead(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	for _, s := range []string{"sentinel", "app_1", "app_2", "app_3", "app_4", "app_5"} {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: s})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
	}
	// An "older version": Sentinel's three tables, not their columns.
	for _, q := range []string{`CREATE SCHEMA app_0`, `CREATE TABLE app_0.schema_migrations (version int)`,
		`CREATE TABLE app_0.executions (key text)`, `CREATE TABLE app_0.leases (key text)`} {
		_, err := pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	r := run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `schemas "app_0" of this database hold Sentinel's tables but could not be read for uncertain executions`)
	require.Contains(t, r.stderr, fmt.Sprintf("more than %d other schemas", maxSchemasShown))

	r = run("status", "--json")
	requireCode(t, r, exitOK)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Equal(t, []string{"app_0"}, st.UncertainOtherSchemasUnread, r.stdout)
	require.True(t, st.MoreOtherSchemas, r.stdout)

	// With only readable schemas, and five or fewer: neither.
	_, err := pool.Exec(ctx, `DROP SCHEMA app_0 CASCADE`)
	require.NoError(t, err)
	r = run("status", "--json")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "uncertain_other_schemas_unread")
	require.NotContains(t, r.stdout, "more_other_schemas")
}
