package sentinel_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// Issue 17.11: Run again after a callback panic returned the old panic at
// once, while the error text said to fix the callback and run again. A
// fresh Run campaigns again.
func TestElectorRunAgainAfterACallbackPanic(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var calls atomic.Int32
	el, err := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second}).Elector("again", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) {
			if calls.Add(1) == 1 {
				panic("first run's bug")
			}
			<-ctx.Done()
		},
	})
	require.NoError(t, err)
	err = el.Run(ctx)
	var pe *sentinel.CallbackPanicError
	require.ErrorAs(t, err, &pe)
	require.Contains(t, pe.Error(), "create a new Elector", "the text says how to run a fixed callback")

	stop := runElector(t, el)
	waitFor(t, 10*time.Second, "leading in the second Run", el.IsLeader)
	// IsLeader turns true as the term starts, before OnElected's goroutine
	// has run: wait for the call (asserting at once failed in a CI run).
	waitFor(t, 10*time.Second, "OnElected called in the second Run", func() bool { return calls.Load() == 2 })
	require.NoError(t, stop())

	// A panic in the last OnDemoted, as Run stops, is reported rather
	// than swallowed (Run used to return nil).
	dem, err := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second}).Elector("demoted", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) { <-ctx.Done() },
		OnDemoted: func(int64) { panic("demotion bug") },
	})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- dem.Run(rctx) }()
	waitFor(t, 10*time.Second, "leading", dem.IsLeader)
	cancel()
	require.ErrorAs(t, <-errc, &pe)
	require.Equal(t, "OnDemoted", pe.Callback)
}

// Issue 17.12: two clients with the same Owner saw each other's grants as
// their own: a Lease held by the other was reported as held "by this
// client", an elector took the other's term for its own (no OnNewLeader,
// its hold-off never cleared), and their electors overwrote each other's
// member row. Grants are told apart by token and term now, and a second
// elector with a live Owner waits instead of taking over the member row.
func TestClientsSharingAnOwnerStayApart(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = time.Second
	cfg := sentinel.Config{DefaultTTL: ttl, Owner: "worker-1"}
	a, b := e.client(&cfg), e.client(&cfg)

	la, err := a.Lease(ctx, "k")
	require.NoError(t, err)
	_, err = b.Lease(ctx, "k")
	var held *sentinel.HeldError
	require.ErrorAs(t, err, &held)
	require.False(t, held.Self, "b does not hold a's lease")
	_, err = a.Lease(ctx, "k")
	require.ErrorAs(t, err, &held)
	require.True(t, held.Self, "a holds it")
	require.NoError(t, la.Release(ctx))

	// Electors: a leads; b neither clobbers a's member row nor takes a's
	// term for its own.
	var newLeader atomic.Int64
	ea, err := a.Elector("g", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopA := runElector(t, ea)
	waitFor(t, 10*time.Second, "a to lead", ea.IsLeader)
	term := ea.Term()
	memberToken := func() int64 {
		var tok int64
		require.NoError(t, admin.QueryRow(ctx, "SELECT token FROM "+e.table("members")+" WHERE election = 'g'").Scan(&tok))
		return tok
	}
	before := memberToken()
	eb, err := b.Elector("g", sentinel.ElectorOptions{OnNewLeader: func(l sentinel.Leader) { newLeader.Store(l.Term) }})
	require.NoError(t, err)
	runElector(t, eb)
	time.Sleep(3 * ttl)
	require.True(t, ea.IsLeader(), "a kept leading")
	require.Equal(t, term, ea.Term())
	require.False(t, eb.IsLeader())
	ms, err := a.Members(ctx, "g")
	require.NoError(t, err)
	require.Len(t, ms, 1, "one member row per Owner")
	require.True(t, ms[0].Leader)
	require.Equal(t, before, memberToken(), "b overwrote a's member row")

	// a stops: b joins and leads at once (a released its term and deleted
	// its member row).
	require.NoError(t, stopA())
	waitFor(t, 5*time.Second, "b to lead after a stopped", eb.IsLeader)
	require.Greater(t, eb.Term(), term)
	require.Zero(t, newLeader.Load(), "b never joined while a ran: no campaign, no OnNewLeader")
}

// A second Run of the same Elector was refused with "an elector for
// "default"/"g" is already running in this client; use one per client",
// as if some other elector of the group ran in the client: the caller who
// called Run twice was pointed at the wrong mistake (the check for this
// very Elector came second and never ran). Each refusal now names its own
// cause and what to do, and neither disturbs the running elector.
func TestElectorRunTwiceNamesTheCause(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	el, err := c.Elector("twice", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)

	err = el.Run(ctx)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	require.Contains(t, err.Error(), "Run of this elector")
	require.Contains(t, err.Error(), "call Run once")

	other, err := c.Elector("twice", sentinel.ElectorOptions{})
	require.NoError(t, err)
	err = other.Run(ctx)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	require.Contains(t, err.Error(), "another elector")

	require.True(t, el.IsLeader(), "the refused Runs must leave the running one alone")
	require.Equal(t, 1, e.count("members", "election = 'twice'"))
}

// Run's documentation said it returns once ctx ended and OnElected
// returned; it also waits for the OnPoll, OnNewLeader and OnDemoted calls
// queued by then, so a callback that blocks keeps it from returning. The
// documentation now says so; this checks what it says: OnDemoted of the
// last term has run when Run returns, and a blocked OnPoll holds Run.
func TestElectorRunWaitsForQueuedCallbacks(t *testing.T) {
	e := newEnv(t)
	var demoted atomic.Int64
	release := make(chan struct{})
	var blocking atomic.Bool
	el, err := e.client(nil).Elector("queued", sentinel.ElectorOptions{
		OnDemoted: func(term int64) { time.Sleep(200 * time.Millisecond); demoted.Store(term) },
		OnPoll: func() {
			if blocking.Load() {
				<-release
			}
		},
	})
	require.NoError(t, err)
	stop := runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	term := el.Term()
	require.NoError(t, stop())
	require.Equal(t, term, demoted.Load(), "OnDemoted of the last term has run when Run returns")

	blocking.Store(true)
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() { errc <- el.Run(ctx) }()
	waitFor(t, 10*time.Second, "leading again", el.IsLeader)
	cancel()
	select {
	case err := <-errc:
		t.Fatalf("Run returned (%v) while OnPoll was blocked", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after OnPoll returned")
	}
}

// OnElected of a term started while OnDemoted of the elector's previous
// term was still queued or running: a term lost (its row expired under it)
// and won again at once by the same elector had its OnElected run before
// the OnDemoted of the term before it, so a service that sets a flag in
// OnElected and clears it in OnDemoted read "not leading" while it led.
// The callbacks of one elector's terms come in order: OnDemoted(T) returns
// before OnElected(T') starts.
func TestElectorCallbacksOfSuccessiveTermsInOrder(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var events []string
	record := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	el, err := e.client(&sentinel.Config{DefaultTTL: time.Second}).Elector("inorder", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) {
			record(fmt.Sprintf("elected %d", term))
			<-ctx.Done()
		},
		OnDemoted: func(term int64) {
			time.Sleep(300 * time.Millisecond) // a demotion that flushes something
			record(fmt.Sprintf("demoted %d", term))
		},
	})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	first := el.Term()
	// The term's row expires under it: its next renewal finds it lost, and
	// its next campaign wins the expired row at once.
	_, err = admin.Exec(ctxT(t), "UPDATE "+e.table("leaders")+" SET expires_at = clock_timestamp() WHERE election = 'inorder'")
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "a second term", func() bool { return el.Term() > first })
	second := el.Term()
	waitFor(t, 5*time.Second, "both callbacks of the first term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(events) >= 3
	})
	mu.Lock()
	got := append([]string(nil), events[:3]...)
	mu.Unlock()
	require.Equal(t, []string{fmt.Sprintf("elected %d", first), fmt.Sprintf("demoted %d", first), fmt.Sprintf("elected %d", second)}, got)
}

// The order above does not deadlock an OnDemoted that resigns the term won
// meanwhile: that term's OnElected, waiting for it, is skipped (and so is
// its OnDemoted), and Resign returns once the term was released.
func TestElectorOnDemotedMayResignTheNextTerm(t *testing.T) {
	e := newEnv(t)
	var el *sentinel.Elector
	var elected, demoted atomic.Int64
	resigned := make(chan error, 1)
	el, err := e.client(&sentinel.Config{DefaultTTL: time.Second}).Elector("resignnext", sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) { elected.Add(1); <-ctx.Done() },
		OnDemoted: func(term int64) {
			demoted.Add(1)
			if demoted.Load() == 1 {
				time.Sleep(300 * time.Millisecond) // the next term is won meanwhile
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				resigned <- el.Resign(ctx)
			}
		},
	})
	require.NoError(t, err)
	stop := runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	first := el.Term()
	_, err = admin.Exec(ctxT(t), "UPDATE "+e.table("leaders")+" SET expires_at = clock_timestamp() WHERE election = 'resignnext'")
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "a second term", func() bool { return el.Term() > first })
	select {
	case err := <-resigned:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Resign from OnDemoted did not return")
	}
	require.NoError(t, stop())
	require.Equal(t, int64(1), elected.Load(), "the resigned term's OnElected was skipped")
	require.Equal(t, int64(1), demoted.Load(), "and so was its OnDemoted")
}

// VerifyTerm without WithTTL bounded the guarded transaction's idle time
// by Config.DefaultTTL, not by the election's TTL: an Elector with a 3 s
// TTL on a client whose default is 20 s let a leader frozen inside its
// guarded transaction hold off the next election for 20 s. The bound is
// now the term's own TTL, read from its row (and still capped at
// PostgreSQL's maximum).
func TestVerifyTermBoundsByTheTermsOwnTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 20 * time.Second})
	for _, tc := range []struct {
		group string
		ttl   time.Duration
		want  []string
	}{
		{"short", 3 * time.Second, []string{"3s", "3001ms"}},
		{"monthly", 30 * 24 * time.Hour, []string{"2147483647ms"}},
	} {
		el, err := c.Elector(tc.group, sentinel.ElectorOptions{TTL: tc.ttl})
		require.NoError(t, err)
		runElector(t, el)
		waitFor(t, 10*time.Second, "leading", el.IsLeader)
		tx, err := c.Pool().Begin(ctx)
		require.NoError(t, err)
		var idle string
		err = c.VerifyTerm(ctx, tx, tc.group, el.Term())
		if err == nil {
			err = tx.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idle)
		}
		_ = tx.Rollback(ctx)
		require.NoError(t, err)
		require.Contains(t, tc.want, idle, "group %s", tc.group)
	}
}

// A refused VerifyTerm set the transaction's idle bound all the same, from
// a row whose term was resigned or had expired: expires_at - renewed_at
// is then anything from 0 to one renewal interval (129 ms measured), and
// the server ended the caller's transaction, and its connection, before
// the caller's Rollback arrived. A refusal now leaves the setting alone.
func TestVerifyTermRefusedLeavesTheIdleBoundAlone(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	el, err := c.Elector("resigned", sentinel.ElectorOptions{TTL: 3 * time.Second})
	require.NoError(t, err)
	runElector(t, el)
	waitFor(t, 10*time.Second, "leading", el.IsLeader)
	term := el.Term()
	require.NoError(t, el.Resign(ctx))
	for _, tc := range []struct {
		name string
		term int64
	}{{"the resigned term", term}, {"a term that never was", term + 1000}} {
		tx, err := c.Pool().Begin(ctx)
		require.NoError(t, err)
		err = c.VerifyTerm(ctx, tx, "resigned", tc.term)
		require.ErrorIs(t, err, sentinel.ErrStaleToken, tc.name)
		var idle string
		require.NoError(t, tx.QueryRow(ctx, "SHOW idle_in_transaction_session_timeout").Scan(&idle), tc.name)
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, "0", idle, "%s: refused, yet the transaction was given an idle bound", tc.name)
	}
}
