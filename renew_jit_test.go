package sentinel_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The heartbeat's renewal of thousands of leases is planned without JIT
// compilation, even in the custom plans PostgreSQL makes for a prepared
// statement's first runs on a connection, which see the arrays' values:
// compiling cost each such renewal over a second (5,000 leases), past the
// renewal's bound, and every lease of the client was lost.
func TestRenewalOfManyLeasesIsNotJITCompiled(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var jit bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_catalog.pg_jit_available()").Scan(&jit))
	if !jit {
		t.Skip("this server has no JIT provider: nothing to check")
	}
	const n = 5000
	nss, keys := make([]string, n), make([]string, n)
	tokens, ttls, kinds := make([]int64, n), make([]int64, n), make([]int16, n)
	for i := range n {
		nss[i], keys[i], tokens[i], ttls[i] = "held", fmt.Sprintf("k-%d", i), int64(i+1), 3_000_000
	}
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL jit = on")
	require.NoError(t, err)
	// An unnamed statement is planned with its parameters' values: a
	// custom plan.
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, FORMAT TEXT) "+sentinel.RenewSQL(c), "nobody", nss, keys, tokens, ttls, kinds)
	require.NoError(t, err)
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	if i := strings.Index(plan.String(), "JIT:"); i >= 0 {
		t.Fatalf("the renewal of %d leases was JIT-compiled:\n%s", n, plan.String()[i:])
	}
}
