package sentinel_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// crashCluster is a private cluster for a crash test (settings: a
// wal_writer_delay long enough that a commit that does not wait for its
// flush stays in memory until the crash), with newClient making a client
// on a pool of its own there, closed with the test.
func crashCluster(t *testing.T, ctx context.Context, settings map[string]string) (*pgtemp.Cluster, func(sentinel.Config) *sentinel.Client) {
	t.Helper()
	cl, err := pgtemp.Start(ctx, pgtemp.Options{Settings: settings})
	if err != nil {
		t.Skipf("no local PostgreSQL binaries for a private cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl, func(cfg sentinel.Config) *sentinel.Client {
		p, err := pgxpool.New(ctx, cl.URL())
		require.NoError(t, err)
		t.Cleanup(p.Close)
		c, err := sentinel.New(p, &cfg)
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
}

// flushDelayed keeps unflushed commits in memory for 10 s (crashCluster).
var flushDelayed = map[string]string{"wal_writer_delay": "10000ms", "autovacuum": "off"}

// A waiter's registration commits without waiting for its WAL flush: a
// crash of the server can lose it, and with it the sequence's advance that
// minted its id, which the sequence then hands out again. Two waiters of
// one client on one key must never both hold the lease because the second
// was registered under the first one's lost id: the first used to take
// the second's grant by that id (its wake-up, or a read of it), and both
// held the lease, with the same token.
func TestLeaseWaiterIdReissuedAfterACrash(t *testing.T) {
	leaseWaiterIdReissued(t, func(ctx context.Context, cl *pgtemp.Cluster, _ *pgxpool.Pool) {
		require.NoError(t, cl.Stop(ctx, "immediate"))
		require.NoError(t, cl.Start(ctx))
	})
}

// The same when only a backend crashes (the OOM killer's SIGKILL): the
// postmaster lives on, with its start time, and reinitializes its shared
// memory, where the unflushed commit was. The statements' epoch (the
// statistics' reset time) changes all the same.
func TestLeaseWaiterIdReissuedAfterABackendCrash(t *testing.T) {
	leaseWaiterIdReissued(t, func(ctx context.Context, _ *pgtemp.Cluster, adm *pgxpool.Pool) {
		var pid int
		var started time.Time
		require.NoError(t, adm.QueryRow(ctx, "SELECT pg_backend_pid(), pg_postmaster_start_time()").Scan(&pid, &started))
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		var after time.Time
		require.Eventually(t, func() bool {
			return adm.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&after) == nil
		}, 20*time.Second, 50*time.Millisecond)
		require.True(t, after.Equal(started), "the postmaster restarted: not the case this test is for")
	})
}

func leaseWaiterIdReissued(t *testing.T, crash func(context.Context, *pgtemp.Cluster, *pgxpool.Pool)) {
	ctx := ctxT(t)
	cl, newClient := crashCluster(t, ctx, flushDelayed)
	holder := newClient(sentinel.Config{DefaultTTL: time.Hour, WaitRecheck: 100 * time.Millisecond})
	waiters := newClient(sentinel.Config{DefaultTTL: 12 * time.Second, WaitRecheck: 100 * time.Millisecond})
	require.NoError(t, holder.Migrate(ctx))
	adm, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	held, err := holder.Lease(ctx, "k")
	require.NoError(t, err)
	// The next nextval writes the sequence's WAL record (setval resets
	// its count of values logged ahead); this commit is durable.
	_, err = adm.Exec(ctx, "SELECT pg_catalog.setval('sentinel.fencing_token', (SELECT last_value FROM sentinel.fencing_token))")
	require.NoError(t, err)

	type result struct {
		who string
		l   *sentinel.Lease
		err error
	}
	res := make(chan result, 2)
	wait := func(who string) {
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		l, err := waiters.Lease(wctx, "k", sentinel.WithWait())
		res <- result{who, l, err}
	}
	go wait("A")
	var regA int64
	waitFor(t, 10*time.Second, "A to register", func() bool {
		return adm.QueryRow(ctx, "SELECT waiter FROM sentinel.lease_waiters WHERE key = 'k'").Scan(&regA) == nil
	})
	crash(ctx, cl, adm)
	var n int
	require.Eventually(t, func() bool {
		return adm.QueryRow(ctx, "SELECT count(*) FROM sentinel.lease_waiters").Scan(&n) == nil
	}, 20*time.Second, 50*time.Millisecond)
	if n != 0 {
		t.Skip("A's registration reached the disk before the crash")
	}
	go wait("B")
	var regB int64
	waitFor(t, 10*time.Second, "B to register", func() bool {
		return adm.QueryRow(ctx, "SELECT waiter FROM sentinel.lease_waiters WHERE key = 'k'").Scan(&regB) == nil
	})
	t.Logf("A registered as %d (lost in the crash), B as %d", regA, regB)
	holder.Pool().Reset() // its connections died with the server
	require.NoError(t, held.Release(ctx))
	var first result
	select {
	case first = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("neither waiter got the lease")
	}
	require.NoError(t, first.err)
	t.Logf("%s holds the lease, token %d", first.who, first.l.Token())
	// The other waits on while first holds: it must not hold too.
	select {
	case r := <-res:
		if r.err == nil {
			t.Fatalf("%s and %s both hold the lease (tokens %d and %d; first's end: %v)",
				first.who, r.who, first.l.Token(), r.l.Token(), first.l.Err())
		}
		t.Logf("%s: %v", r.who, r.err)
	case <-time.After(15 * time.Second):
		require.NoError(t, first.l.Release(ctx))
	}
}

// The same for a queue's tickets: a draw that serves nothing commits
// without waiting for its flush, so a crash can lose a waiting ticket with
// the sequence's advance that minted its number, which is then drawn
// again, here by another Turn of the same client. The first Turn used to
// take the second one's row for its own (same number, same owner): both
// were served on it at once. (Listening disabled: both re-check on a
// timer, after the handover.)
func TestTurnTicketReissuedAfterACrash(t *testing.T) {
	ctx := ctxT(t)
	cl, newClient := crashCluster(t, ctx, flushDelayed)
	holder := newClient(sentinel.Config{DefaultTTL: 30 * time.Second, WaitRecheck: 8 * time.Second})
	waiters := newClient(sentinel.Config{DefaultTTL: 30 * time.Second, WaitRecheck: 8 * time.Second, DisableListen: true})
	require.NoError(t, holder.Migrate(ctx))
	adm, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	held, err := holder.Turn(ctx, "r")
	require.NoError(t, err)
	_, err = adm.Exec(ctx, "SELECT pg_catalog.setval('sentinel.fencing_token', (SELECT last_value FROM sentinel.fencing_token))")
	require.NoError(t, err)
	type result struct {
		who  string
		turn *sentinel.Turn
		err  error
	}
	res := make(chan result, 2)
	wait := func(who string) {
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		turn, err := waiters.Turn(wctx, "r")
		res <- result{who, turn, err}
	}
	go wait("A")
	var ticketA int64
	waitFor(t, 10*time.Second, "A to draw", func() bool {
		return adm.QueryRow(ctx, "SELECT ticket FROM sentinel.tickets WHERE resource = 'r' AND ticket > $1", held.Ticket()).Scan(&ticketA) == nil
	})
	require.NoError(t, cl.Stop(ctx, "immediate"))
	require.NoError(t, cl.Start(ctx))
	var n int
	require.Eventually(t, func() bool {
		return adm.QueryRow(ctx, "SELECT count(*) FROM sentinel.tickets WHERE ticket > $1", held.Ticket()).Scan(&n) == nil
	}, 20*time.Second, 50*time.Millisecond)
	if n != 0 {
		t.Skip("A's ticket reached the disk before the crash")
	}
	go wait("B")
	var ticketB int64
	waitFor(t, 10*time.Second, "B to draw", func() bool {
		return adm.QueryRow(ctx, "SELECT ticket FROM sentinel.tickets WHERE resource = 'r' AND ticket > $1", held.Ticket()).Scan(&ticketB) == nil
	})
	t.Logf("A drew %d (lost in the crash), B %d", ticketA, ticketB)
	holder.Pool().Reset()
	require.NoError(t, held.Release(ctx))
	var first result
	select {
	case first = <-res:
	case <-time.After(30 * time.Second):
		t.Fatal("neither waiter was served")
	}
	require.NoError(t, first.err)
	t.Logf("%s is served, ticket %d", first.who, first.turn.Ticket())
	select {
	case r := <-res:
		if r.err == nil {
			t.Fatalf("%s and %s are both served (tickets %d and %d; first's end: %v)",
				first.who, r.who, first.turn.Ticket(), r.turn.Ticket(), first.turn.Err())
		}
		t.Logf("%s: %v", r.who, r.err)
	case <-time.After(25 * time.Second):
		require.NoError(t, first.turn.Release(ctx))
	}
}

// A clean restart loses no registration: a waiter registered before it
// carries its registration over to the new server's epoch (found by
// its exact expiry) as soon as its LISTEN connection is back, and is then
// handed the lease by the next release, as before the restart; it used to
// distrust the registration, re-register, and leave the old one to be
// granted and expire unread, the key stranded for the waiter's TTL.
func TestLeaseWaiterKeepsItsRegistrationAcrossACleanRestart(t *testing.T) {
	ctx := ctxT(t)
	cl, newClient := crashCluster(t, ctx, nil)
	holder := newClient(sentinel.Config{DefaultTTL: time.Hour, WaitRecheck: 100 * time.Millisecond})
	const ttl = 9 * time.Second
	waiter := newClient(sentinel.Config{DefaultTTL: ttl, WaitRecheck: 100 * time.Millisecond})
	require.NoError(t, holder.Migrate(ctx))
	held, err := holder.Lease(ctx, "k")
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l, err := waiter.Lease(ctx, "k", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	adm, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(adm.Close)
	var reg int64
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return adm.QueryRow(ctx, "SELECT waiter FROM sentinel.lease_waiters WHERE key = 'k'").Scan(&reg) == nil
	})
	require.NoError(t, cl.Restart(ctx, "fast"))
	adm.Reset()
	holder.Pool().Reset()
	time.Sleep(2 * time.Second) // the waiter's LISTEN connection is back
	require.Equal(t, 1, func() int {
		var n int
		require.NoError(t, adm.QueryRow(ctx, "SELECT count(*) FROM sentinel.lease_waiters WHERE key = 'k'").Scan(&n))
		return n
	}(), "one registration")
	released := time.Now()
	require.NoError(t, held.Release(ctx))
	select {
	case l := <-got:
		require.NotNil(t, l)
		took := time.Since(released)
		t.Logf("the waiter got the lease %s after the release", took)
		require.Less(t, took, ttl/3, "the lease was handed to a registration nobody read")
		require.Greater(t, l.Token(), held.Token())
		require.NoError(t, l.Release(ctx))
	case <-time.After(2 * ttl):
		t.Fatal("the waiter never got the lease")
	}
}
