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

// Issue 17.6: VerifyTerm set idle_in_transaction_session_timeout to the
// TTL in milliseconds, which PostgreSQL refuses above 2^31-1 ms (about 24.8
// days): every VerifyTerm failed for such an election. The bound is now
// capped at PostgreSQL's maximum.
func TestVerifyTermWithATTLOverPostgresMaximum(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 30 * 24 * time.Hour
	c := e.client(nil)
	el, err := c.Elector("monthly", sentinel.ElectorOptions{TTL: ttl})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	tx, err := c.Pool().Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(t, c.VerifyTerm(ctx, tx, "monthly", el.Term(), sentinel.WithTTL(ttl)))
	var idle string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('idle_in_transaction_session_timeout')").Scan(&idle))
	require.Equal(t, "2147483647ms", idle)
	// The guard still refuses a stale term.
	require.ErrorIs(t, c.VerifyTerm(ctx, c.Pool(), "monthly", el.Term()+1, sentinel.WithTTL(ttl)), sentinel.ErrStaleToken)
}
