package sentinel_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Issue 17.5: a lone elector that resigned read its own released row as
// "locked by another transaction" and campaigned every 10 ms until its
// hold-off ended (178-183 statements in 2 s). A follower sleeps until a
// release or an expiry.
func TestResignedLoneElectorDoesNotSpin(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 3 * time.Second // the hold-off after Resign lasts one TTL
	var n counter
	c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.ConnConfig.Tracer = &n }), &sentinel.Config{DefaultTTL: ttl})
	el, err := c.Elector("lone", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	require.NoError(t, el.Resign(ctx))
	before := n.n.Load()
	time.Sleep(2 * time.Second)
	stmts := n.n.Load() - before
	t.Logf("resigned lone elector: %d statements in 2s", stmts)
	// One campaign that finds no live leader, and the member row's
	// renewals (every TTL/3 = 1 s).
	require.LessOrEqual(t, stmts, int64(6))
	require.False(t, el.IsLeader())
	// Once the hold-off is over it leads again.
	waitFor(t, 2*ttl, "leading again after the hold-off", el.IsLeader)
}
