package sentinel_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// waitingFor starts b's Lease(WithWait) on key, returns once its
// registration is stored, and returns the lease's channel and the
// registration's recorded wake-up channel (nil: none recorded).
func waitingFor(t *testing.T, e *env, b *sentinel.Client, key string) (<-chan error, *string) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		l, err := b.Lease(context.Background(), key, sentinel.WithWait())
		if err == nil {
			defer func() { _ = l.Release(context.Background()) }()
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return e.count("lease_waiters", "key = $1", key) == 1 },
		5*time.Second, 2*time.Millisecond, "the waiter never registered")
	var ch *string
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT channel FROM "+e.table("lease_waiters")+" WHERE key = $1", key).Scan(&ch))
	return got, ch
}

// waitCfg keeps a waiter asleep for a minute unless a notification wakes
// it: its registration lasts a minute and it re-checks every minute.
var waitCfg = sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: time.Minute}

// awaited returns a client holding lease "k", the lease, and another
// client's waiter for it, registered (see waitingFor).
func awaited(t *testing.T, e *env) (holder *sentinel.Client, l *sentinel.Lease, got <-chan error, ch *string) {
	t.Helper()
	cfg := waitCfg
	holder = e.client(&cfg)
	l, err := holder.Lease(ctxT(t), "k")
	require.NoError(t, err)
	got, ch = waitingFor(t, e, e.client(&cfg), "k")
	return holder, l, got, ch
}

// handedOver waits for the waiter's Lease to return, which only a
// notification can make prompt: its registration lasts a minute and it
// re-checks every minute otherwise.
func handedOver(t *testing.T, got <-chan error, released time.Time) {
	t.Helper()
	select {
	case err := <-got:
		require.NoError(t, err)
		require.Less(t, time.Since(released), 3*time.Second, "the waiter was not woken by the release")
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

// Migration 14: the wake-up of a lease handed to a waiter goes to the
// channel of the waiter's process (its hub's own) and reaches nobody
// listening on the schema's channel, every other process.
func TestGrantWakeReachesOnlyTheWaitersProcess(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	others := notifications(t, e) // another process, listening on the schema's channel
	a, l, got, ch := awaited(t, e)
	require.NotNil(t, ch, "the registration recorded no channel")
	require.True(t, strings.HasPrefix(*ch, "sentinel_hub."), "channel %q", *ch)
	require.NotEqual(t, sentinel.Channel(a), *ch)

	released := time.Now()
	require.NoError(t, l.Release(ctx))
	handedOver(t, got, released)
	require.Empty(t, payloads(others, "w", 300*time.Millisecond), "the grant's wake-up reached another process")

	// Each process (pool) has its own channel.
	cfg := waitCfg
	c := e.client(&cfg)
	l, err := a.Lease(ctx, "k2")
	require.NoError(t, err)
	got, ch2 := waitingFor(t, e, c, "k2")
	require.NotNil(t, ch2)
	require.NotEqual(t, *ch, *ch2, "two processes share a channel")
	released = time.Now()
	require.NoError(t, l.Release(ctx))
	handedOver(t, got, released)
}

// A registration of a client older than migration 14 records no channel:
// its grant's wake-up goes to the schema's channel, as before, which a
// newer client's hub hears too.
func TestGrantWakeForARegistrationWithoutChannelGoesToTheSchema(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	others := notifications(t, e)
	_, l, got, ch := awaited(t, e)
	require.NotNil(t, ch)
	_, err := admin.Exec(ctx, "UPDATE "+e.table("lease_waiters")+" SET channel = NULL WHERE key = 'k'")
	require.NoError(t, err)

	released := time.Now()
	require.NoError(t, l.Release(ctx))
	handedOver(t, got, released)
	require.Len(t, payloads(others, "w", 300*time.Millisecond), 1, "the wake-up did not go to the schema's channel")
}

// A client older than migration 14 releases through lease_release (now
// lease_release_to without the channel) and sends the wake-up on the
// schema's channel: a newer waiter is woken by it all the same.
func TestOlderClientsReleaseWakesANewerWaiter(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, l, got, _ := awaited(t, e)

	// What a version-13 client sends: sqlRelease of the time, then its
	// wake-up on the schema's channel.
	s := pgx.Identifier{e.schema}.Sanitize()
	var (
		n    int64
		wake string
	)
	released := time.Now()
	require.NoError(t, admin.QueryRow(ctx, "SELECT r.n, r.wake FROM "+s+".lease_release($1, $2, $3, $4, $5::regclass) AS r",
		"default", "k", cfgOwner(t, e, "k"), l.Token(), e.schema+".fencing_token").Scan(&n, &wake))
	require.EqualValues(t, 1, n)
	require.True(t, strings.HasPrefix(wake, "w"), "wake-up %q", wake)
	_, err := admin.Exec(ctx, "SELECT pg_notify($1, $2)", sentinel.Channel(a), wake)
	require.NoError(t, err)
	handedOver(t, got, released)
}

// cfgOwner returns the owner of key's lease row.
func cfgOwner(t *testing.T, e *env, key string) string {
	t.Helper()
	var owner string
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT owner FROM "+e.table("leases")+" WHERE key = $1", key).Scan(&owner))
	return owner
}

// Migration 14 for a queue: the leave ahead of a ticket wakes the
// ticket's process on its own channel, recorded by the draw, and nobody
// listening on the schema's channel.
func TestTurnWakeReachesOnlyTheWaitersProcess(t *testing.T) { turnWake(t, false) }

// A ticket drawn by a client older than migration 14 has no channel: the
// leave ahead of it wakes it on the schema's channel.
func TestTurnWakeForATicketWithoutChannelGoesToTheSchema(t *testing.T) { turnWake(t, true) }

// turnWake: a holds a turn, b's ticket waits behind it; a's release wakes
// b, on b's process's channel, or on the schema's when older (b's ticket
// has no channel).
func turnWake(t *testing.T, older bool) {
	e := newEnv(t)
	ctx := ctxT(t)
	others := notifications(t, e)
	cfg := waitCfg
	a, b := e.client(&cfg), e.client(&cfg)

	first, err := a.Turn(ctx, "printer")
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		turn, err := b.Turn(context.Background(), "printer")
		if err == nil {
			defer func() { _ = turn.Release(context.Background()) }()
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return e.count("tickets", "resource = 'printer'") == 2 },
		5*time.Second, 2*time.Millisecond, "the second ticket was never drawn")
	var ch *string
	require.NoError(t, admin.QueryRow(ctx, "SELECT channel FROM "+e.table("tickets")+
		" WHERE resource = 'printer' ORDER BY ticket DESC LIMIT 1").Scan(&ch))
	require.NotNil(t, ch, "the draw recorded no channel")
	require.True(t, strings.HasPrefix(*ch, "sentinel_hub."), "channel %q", *ch)
	if older {
		_, err = admin.Exec(ctx, "UPDATE "+e.table("tickets")+" SET channel = NULL WHERE resource = 'printer' AND ticket > $1",
			first.Ticket())
		require.NoError(t, err)
	}

	released := time.Now()
	require.NoError(t, first.Release(ctx))
	handedOver(t, got, released)
	served := payloads(others, "s", 300*time.Millisecond)
	if older {
		require.Len(t, served, 1, "the turn's wake-up did not go to the schema's channel")
		return
	}
	require.Empty(t, served, "the turn's wake-up reached another process")
	require.Empty(t, payloads(others, "t", 100*time.Millisecond), "the turn's wake-up reached another process")
}

// Migration 14 for an election: a resignation's grant ('h') goes to the
// successor's process on its own channel, and nobody listening on the
// schema's channel receives it.
func TestResignationWakeReachesOnlyTheSuccessorsProcess(t *testing.T) { resignWake(t, false) }

// A successor older than migration 14 records no channel: the term's
// wake-up goes to the schema's channel.
func TestResignationWakeForASuccessorWithoutChannelGoesToTheSchema(t *testing.T) {
	resignWake(t, true)
}

// resignWake: a leads, b follows and names itself successor; a resigns
// and b leads from the wake-up, sent on b's process's channel, or on the
// schema's when older (no channel recorded).
func resignWake(t *testing.T, older bool) {
	e := newEnv(t)
	ctx := ctxT(t)
	others := notifications(t, e)
	aCfg, bCfg := waitCfg, waitCfg
	aCfg.Owner, bCfg.Owner = "a", "b"
	a, err := e.client(&aCfg).Elector("group", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	b, err := e.client(&bCfg).Elector("group", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to name itself successor", func() bool {
		return e.count("leaders", "election = 'group' AND next_owner = 'b' AND next_channel LIKE 'sentinel_hub.%'") == 1
	})
	time.Sleep(100 * time.Millisecond) // registered, it sleeps
	if older {
		_, err = admin.Exec(ctx, "UPDATE "+e.table("leaders")+" SET next_channel = NULL WHERE election = 'group'")
		require.NoError(t, err)
	}

	resigned := time.Now()
	require.NoError(t, a.Resign(ctx))
	waitFor(t, 3*time.Second, "b to lead", b.IsLeader)
	require.Less(t, time.Since(resigned), 3*time.Second)
	handed := payloads(others, "h", 300*time.Millisecond)
	if older {
		require.Len(t, handed, 1, "the term's wake-up did not go to the schema's channel")
		return
	}
	require.Empty(t, handed, "the term's wake-up reached another process")
}
