package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An operator who names no schema runs idempotency list, the listing the
// runbook gives for HTTP requests, while the application's middleware
// keeps its keys in a schema of its own (Config.Schema) and one of them
// is uncertain: it said "no Idempotency-Keys uncertain in any namespace",
// exit 0, and nothing else. It names the other schema on stderr, with the
// same listing there, runnable as printed; stdout is unchanged.
func TestIdempotencyListNamesOtherSchemas(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	for _, schema := range []string{"sentinel", "billing"} {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
	}
	app, err := sentinel.New(pool, &sentinel.Config{Schema: "billing", Namespace: "payments"})
	require.NoError(t, err)
	t.Cleanup(app.Close)
	// A request whose outcome is unknown, as the middleware leaves it.
	_, err = sentinel.Once(ctx, app, idempotency.ExecutionKey("cus_1", "k-1"), func(context.Context) (int, error) {
		return 0, errors.New("the card network timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	r := run("idempotency", "list", "--uncertain")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "no Idempotency-Keys uncertain in any namespace")
	require.Contains(t, r.stderr, `sentinel: note: uncertain executions in other schemas of this database too: "billing"; the same listing for every namespace there:`)
	line := strings.TrimSpace(r.stderr[strings.LastIndex(r.stderr, "\n  sentinel "):])
	require.Equal(t, "sentinel idempotency list --uncertain --schema billing", line)
	r = run(strings.Fields(line)[1:]...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "k-1")
	require.Contains(t, r.stdout, "UNCERTAIN")

	r = run("idempotency", "list", "--uncertain", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `{"keys": []}`, r.stdout)
	require.Contains(t, r.stderr, "\n  sentinel idempotency list --json --uncertain --schema billing\n")
}
