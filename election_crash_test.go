package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A term is minted in the commit that grants it, and that commit waits for
// its flush: a crash of the server right after an election loses neither
// the term nor the sequence's advance that minted it, even when the
// sequence's last WAL record came from a commit that did not wait (a lease
// waiter's registration, here) and the term took a value logged ahead by
// it. After the restart the group is still led by the same elector in the
// same term, and the next term is above it: a term is never issued twice.
func TestElectorTermSurvivesACrash(t *testing.T) {
	ctx := ctxT(t)
	cl, newClient := crashCluster(t, ctx, flushDelayed)
	cfg := sentinel.Config{DefaultTTL: 3 * time.Second, WaitRecheck: 100 * time.Millisecond}
	ca, cb, cw := newClient(cfg), newClient(cfg), newClient(sentinel.Config{DefaultTTL: 30 * time.Second})
	require.NoError(t, ca.Migrate(ctx))
	adm, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(adm.Close)

	held, err := cb.Lease(ctx, "k", sentinel.WithTTL(time.Hour))
	require.NoError(t, err)
	// The next nextval writes the sequence's WAL record, in the waiter's
	// registration, which commits without waiting for its flush.
	_, err = adm.Exec(ctx, "SELECT pg_catalog.setval('sentinel.fencing_token', (SELECT last_value FROM sentinel.fencing_token))")
	require.NoError(t, err)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() { _, _ = cw.Lease(wctx, "k", sentinel.WithWait()) }()
	var reg int64
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return adm.QueryRow(ctx, "SELECT waiter FROM sentinel.lease_waiters WHERE key = 'k'").Scan(&reg) == nil
	})

	a, err := ca.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopA := runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	term := a.Term()
	require.Greater(t, term, reg, "the term came after the registration's value")
	t.Logf("registration %d, term %d", reg, term)

	require.NoError(t, cl.Stop(ctx, "immediate"))
	require.NoError(t, cl.Start(ctx))
	var owner string
	var got int64
	require.Eventually(t, func() bool {
		return adm.QueryRow(ctx, "SELECT owner, term FROM sentinel.leaders WHERE election = 'scheduler'").Scan(&owner, &got) == nil
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, term, got, "the term granted before the crash is the group's term after it")
	require.Equal(t, ca.Config().Owner, owner)

	// a steps down (its Run ends, resigning); b takes the group over with a
	// new, greater term.
	for _, c := range []*sentinel.Client{ca, cb, cw} {
		c.Pool().Reset() // their connections died with the server
	}
	require.NoError(t, stopA())
	b, err := cb.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 20*time.Second, "b to lead", b.IsLeader)
	require.Greater(t, b.Term(), term, "a term after the crash is above every term before it")

	// A term handed over by a resignation (granted in the resigning
	// statement, read by the successor from its wake-up) survives a crash
	// right after the successor started leading.
	cc := newClient(cfg)
	c, err := cc.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, c)
	waitFor(t, 10*time.Second, "c to wait for the group", func() bool {
		var n int
		return adm.QueryRow(ctx, "SELECT count(*) FROM sentinel.leaders WHERE election = 'scheduler' AND waiting_until > pg_catalog.clock_timestamp()").Scan(&n) == nil && n == 1
	})
	require.NoError(t, b.Resign(ctx))
	waitFor(t, 10*time.Second, "c to lead", c.IsLeader)
	handed := c.Term()
	require.Greater(t, handed, b.Term())
	require.NoError(t, cl.Stop(ctx, "immediate"))
	require.NoError(t, cl.Start(ctx))
	require.Eventually(t, func() bool {
		return adm.QueryRow(ctx, "SELECT owner, term FROM sentinel.leaders WHERE election = 'scheduler'").Scan(&owner, &got) == nil
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, handed, got, "the handed-over term is the group's term after the crash")
	require.Equal(t, cc.Config().Owner, owner)
	_ = held.Release(ctx)
}
