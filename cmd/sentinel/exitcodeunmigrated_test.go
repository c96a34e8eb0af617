package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status --exit-code against a schema with no Sentinel tables (an
// operator who names no schema, the application's tables in a schema of
// its own) printed the raw SQL error (`relation "sentinel.executions"
// does not exist (SQLSTATE 42P01)`) where status says the schema is not
// migrated and names the schemas that hold the tables, each with the
// same command there: the check exits 1 (not "nothing to do"), and now
// says why with a command to copy, as status does.
func TestStatusExitCodeUnmigratedSchema(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	c, err := sentinel.New(pool, &sentinel.Config{Schema: "app_one", Namespace: "payments"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctx))
	_, err = sentinel.Once(ctx, c, "pay-1", func(context.Context) (int, error) { return 0, errors.New("card network timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	for _, args := range [][]string{{"status", "--exit-code"}, {"status", "--exit-code", "--json"}} {
		r := run(args...)
		requireCode(t, r, exitError)
		require.NotContains(t, r.stderr, "SQLSTATE 42P01)\n", "%v: not only the raw error", args)
		require.Contains(t, r.stderr, `schema "sentinel" is not migrated`, "%v", args)
		require.Contains(t, r.stderr, `Sentinel's tables are in schema "app_one" of this database; the same command there:`, "%v", args)
		line := findCommand(t, r.stderr, "sentinel status --exit-code")
		require.Equal(t, strings.Join(append([]string{"sentinel"}, args...), " ")+" --schema app_one", line)
		p := run(strings.Fields(line)[1:]...)
		requireCode(t, p, exitAttention)
		require.Contains(t, p.stderr, `1 uncertain in namespace "payments"`)
	}

	// A --schema never migrated: the same, and the command that creates it.
	r := run("status", "--exit-code", "--schema", "nope")
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, `schema "nope" is not migrated`)
	require.Contains(t, r.stderr, "\n  sentinel status --exit-code --schema app_one\n")
	require.Contains(t, r.stderr, "\n  sentinel migrate --schema nope\n")
}
