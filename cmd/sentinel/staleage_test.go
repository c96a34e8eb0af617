package main

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// inspect and idempotency inspect of a key rerun pending too long said
// "since: ... (12m03s ago)" and, a few lines below, "next: its lease ended
// 12m3s ago": two spellings of one age, the second Go's. The next line now
// says it as every other age is said (reltime: 12m03s ago).
func TestStaleRerunAgeSpelledAsEveryAge(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	pay := e.newClient("pay ments")
	httpKey := idempotency.ExecutionKey("cus 1's $HOME", "k-old")
	for _, k := range []string{httpKey, "rr-old"} {
		_, err := sentinel.Once(ctxT(t), pay, k, fail, sentinel.WithRerun(3))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = pg_catalog.now() - interval '12 minutes 3 seconds', updated_at = pg_catalog.now() - interval '12 minutes 3 seconds'")
	require.NoError(t, err)
	for _, c := range [][]string{
		{"inspect", "rr-old", "-n", "pay ments", "--rerun-pending-after", "10m"},
		{"inspect", httpKey, "-n", "pay ments", "--rerun-pending-after", "10m"},
		{"idempotency", "inspect", "k-old", "--scope", "cus 1's $HOME", "-n", "pay ments", "--rerun-pending-after", "10m"},
	} {
		r := e.run(c...)
		requireCode(t, r, exitOK)
		require.Regexp(t, `since: +\S+ \S+  \(12m0\ds ago\)`, r.stdout, "%v", c)
		if c[0] == "inspect" && c[1] == httpKey {
			continue // it points to idempotency inspect
		}
		require.Regexp(t, `next: its lease ended 12m0\ds ago and no`, r.stdout, "%v", c)
	}
}
