package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status --exit-code with no --schema pages "for anything anywhere", but
// it read only the first five other schemas holding Sentinel's tables
// (the limit of status's listing of uncertain work elsewhere): an
// uncertain key in a sixth exited 0, with at most a note on stderr in the
// text output, and nothing at all in --json. The check now reads every
// other schema, up to maxAttentionSchemas, and says when there were more
// (--json: "attention"."more_schemas").
func TestStatusExitCodeReadsEverySchema(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	migrated := func(schema, ns string) *sentinel.Client {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	migrated("sentinel", "default")
	for i := 1; i <= maxSchemasShown; i++ {
		migrated(fmt.Sprintf("app_%d", i), "default")
	}
	last := migrated("zz_mail", "mail") // the sixth other schema, in name order
	_, err := sentinel.Once(ctx, last, "mail-1", func(context.Context) (int, error) { return 0, errors.New("smtp timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	r := run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 uncertain in namespace "mail" of schema "zz_mail"`)
	line := findCommand(t, r.stderr, "sentinel list --uncertain")
	require.Equal(t, "sentinel list --uncertain -n mail --schema zz_mail", line)
	p := run(strings.Fields(line)[1:]...)
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "mail-1")

	r = run("status", "--exit-code", "--json")
	requireCode(t, r, exitAttention)
	at := attentionOf(t, r)
	require.Len(t, at.Found, 1, r.stdout)
	require.Equal(t, "zz_mail", at.Found[0].Schema)
	require.False(t, at.MoreSchemas)
}
