package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// list PREFIX --uncertain named, on stderr, every other schema with any
// uncertain execution, as "the same listing" there: the listing printed
// for it found no key with PREFIX ("no executions match"), and named the
// next schema, a chain with nothing at its end. The other schemas named
// are now those with an uncertain key starting with PREFIX.
func TestListPrefixUncertainOtherSchemas(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	client := func(schema string) *sentinel.Client {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "payments"})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	own, other := client("sentinel"), client("app_mail")
	_, err := sentinel.Once(ctx, own, "charge-1", fail)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, other, "mail-1", fail)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	r := run("list", "charge-", "--uncertain")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "charge-1")
	require.NotContains(t, r.stderr, "app_mail", "no key there starts with charge-")

	// Without PREFIX, as before: every other schema with uncertain keys.
	r = run("list", "--uncertain")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `uncertain executions in other schemas of this database too: "app_mail"`)

	// A key with PREFIX there: named, and the listing printed finds it.
	_, err = sentinel.Once(ctx, other, "charge-2", fail)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	r = run("list", "charge-", "--uncertain")
	requireCode(t, r, exitOK)
	line := findCommand(t, r.stderr, "sentinel list")
	require.Equal(t, "sentinel list charge- --uncertain --schema app_mail", line)
	p := run(strings.Fields(line)[1:]...)
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "charge-2")
	require.NotContains(t, p.stdout, "mail-1")
}
