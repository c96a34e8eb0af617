package sentinel_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
)

// provider is the test's card provider (providerDDL) in e's schema.
type provider struct {
	e     *env
	dedup bool
}

func newProvider(t *testing.T, e *env, dedup bool) *provider {
	t.Helper()
	_, err := admin.Exec(ctxT(t), fmt.Sprintf(providerDDL, pgx.Identifier{e.schema}.Sanitize()))
	require.NoError(t, err)
	return &provider{e: e, dedup: dedup}
}

// fn is the Once fn that charges key's payment, passing EffectKey(ctx).
func (p *provider) fn(c *sentinel.Client, key string, runs *atomic.Int32) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		if runs != nil {
			runs.Add(1)
		}
		return providerCharge(ctx, admin, p.e.schema, key, sentinel.EffectKey(ctx), p.dedup)
	}
}

// charges returns key's charges at the provider (the effects) and the
// requests it received for them.
func (p *provider) charges(t *testing.T, key string) (charges, requests int) {
	t.Helper()
	require.NoError(t, admin.QueryRow(ctxT(t), `SELECT count(*), coalesce(sum(requests), 0) FROM `+p.e.table("provider_charges")+
		` WHERE once_key = $1`, key).Scan(&charges, &requests))
	return charges, requests
}

// killCharge runs a child process that calls Once on key charging through
// the provider (with WithRerun(rerun) when rerun > 0) and SIGKILLs it in
// flight (after the charge, inside fn) or after fn returned (before its
// outcome is stored), as where says. The child's TTL is ttl.
func killCharge(t *testing.T, e *env, key, where string, dedup bool, rerun int, ttl time.Duration) {
	t.Helper()
	prov := "plain"
	if dedup {
		prov = "dedup"
	}
	testmain.KillInside(t, childEnv+"=charge", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+e.schema,
		"SENTINEL_CHILD_KEY="+key, "SENTINEL_CHILD_WHERE="+where, "SENTINEL_CHILD_PROVIDER="+prov,
		"SENTINEL_CHILD_RERUN="+strconv.Itoa(rerun), "SENTINEL_CHILD_TTL="+ttl.String())
}

// The crash table: a worker process charging a card is SIGKILLed in flight
// or after fn returned; then the payment is retried as documented (Once
// again, same options). Without WithRerun the key is uncertain and fn is
// not run again: one charge, one case for an operator (today's outcome).
// With WithRerun and a provider that deduplicates by EffectKey, the retry
// runs fn again and the provider returns the same charge: 0 double
// charges, 0 operator cases. With WithRerun and a plain provider the
// retry charges twice: the option is only for deduplicated effects.
func TestRerunCrashTable(t *testing.T) {
	const ttl = time.Second
	for _, where := range []string{"inflight", "returned"} {
		for _, dedup := range []bool{true, false} {
			for _, rerun := range []int{0, 3} {
				name := fmt.Sprintf("%s/dedup=%v/rerun=%d", where, dedup, rerun)
				t.Run(name, func(t *testing.T) {
					e := newEnv(t)
					p := newProvider(t, e, dedup)
					c := e.client(&sentinel.Config{DefaultTTL: ttl})
					key := "pay-" + where
					killCharge(t, e, key, where, dedup, rerun, ttl)
					first := waitLeaseExpired(t, c, key)
					require.Equal(t, sentinel.StateExecuting, first.State)

					var opts []sentinel.Option
					if rerun > 0 {
						opts = append(opts, sentinel.WithRerun(rerun))
					}
					var runs atomic.Int32
					res, err := sentinel.Once(ctxT(t), c, key, p.fn(c, key, &runs), opts...)
					charges, requests := p.charges(t, key)
					uncertain, _, lerr := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true})
					require.NoError(t, lerr)
					if rerun == 0 {
						require.ErrorIs(t, err, sentinel.ErrUncertain)
						require.Zero(t, runs.Load(), "fn never runs again without WithRerun")
						require.Equal(t, 1, charges)
						require.Equal(t, 1, requests)
						require.Len(t, uncertain, 1, "one case for an operator")
						return
					}
					require.NoError(t, err)
					require.False(t, res.Cached)
					require.EqualValues(t, 1, runs.Load())
					require.Greater(t, res.Token, first.Token, "the re-run has its own, newer token")
					require.Empty(t, uncertain, "no case for an operator")
					ex, ierr := c.Inspect(ctxT(t), key)
					require.NoError(t, ierr)
					require.Equal(t, sentinel.StateCompleted, ex.State)
					require.Equal(t, 2, ex.Attempt)
					require.Equal(t, rerun, ex.MaxAttempts)
					requireRerunEvent(t, c, key, 2, first.Token)
					if dedup {
						require.Equal(t, 1, charges, "no double charge")
						require.Equal(t, 2, requests, "the provider saw the re-run and deduplicated it")
						require.Equal(t, "ch_1", res.Value, "the re-run got the first attempt's charge")
					} else {
						require.Equal(t, 2, charges, "a plain provider charges the re-run again")
					}
				})
			}
		}
	}
}

// requireRerunEvent checks that key's history records the re-run that
// started attempt with a rerun event naming the previous token.
func requireRerunEvent(t *testing.T, c *sentinel.Client, key string, attempt int, prevToken int64) {
	t.Helper()
	evs, err := c.History(ctxT(t), key)
	require.NoError(t, err)
	for _, ev := range evs {
		if ev.Type != "rerun" || ev.Metadata["attempt"] != float64(attempt) {
			continue
		}
		require.Equal(t, float64(prevToken), ev.Metadata["previous_token"], "rerun event %+v", ev)
		require.Greater(t, ev.Token, prevToken)
		require.Equal(t, sentinel.StateExecuting, ev.State)
		return
	}
	t.Fatalf("no rerun event for attempt %d in %+v", attempt, evs)
}

// Attempts are bounded: with WithRerun(3), three worker processes killed
// in flight use the three attempts, each re-running the key after the
// previous one's lease expired; the fourth call finds the key uncertain,
// as without the option, and it is listed for an operator. The provider
// saw three requests and made one charge.
func TestRerunAttemptsAreBounded(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	var prev int64
	for attempt := 1; attempt <= 3; attempt++ {
		killCharge(t, e, "pay", "inflight", true, 3, ttl)
		ex := waitLeaseExpired(t, c, "pay")
		require.Equal(t, attempt, ex.Attempt)
		require.Equal(t, 3, ex.MaxAttempts)
		require.Greater(t, ex.Token, prev, "tokens increase")
		require.Equal(t, attempt < 3, ex.Rerunnable())
		if attempt > 1 {
			requireRerunEvent(t, c, "pay", attempt, prev)
		}
		prev = ex.Token
		uncertain, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true})
		require.NoError(t, err)
		require.Len(t, uncertain, map[bool]int{true: 0, false: 1}[attempt < 3])
	}
	var runs atomic.Int32
	_, err := sentinel.Once(ctxT(t), c, "pay", p.fn(c, "pay", &runs), sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorContains(t, err, "attempt 3, the last WithRerun allows (3)")
	require.Zero(t, runs.Load())
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 3, requests)
	require.Equal(t, 3, e.count("events", "key = 'pay' AND event = 'started'"))
	require.Equal(t, 2, e.count("events", "key = 'pay' AND event = 'rerun'"))
}

// A WithWait caller waiting for a key whose worker process is killed in
// flight runs it itself once the lease expires (WithRerun), instead of
// returning ErrUncertain.
func TestRerunByWaiter(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=charge", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+e.schema,
		"SENTINEL_CHILD_KEY=pay", "SENTINEL_CHILD_WHERE=inflight", "SENTINEL_CHILD_PROVIDER=dedup",
		"SENTINEL_CHILD_RERUN=2", "SENTINEL_CHILD_TTL="+ttl.String())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "INSIDE\n", line)

	// The waiter counts itself in while the child runs fn, then the child
	// is killed.
	type outcome struct {
		res sentinel.Result[string]
		err error
	}
	done := make(chan outcome, 1)
	var runs atomic.Int32
	go func() {
		res, err := sentinel.Once(ctxT(t), c, "pay", p.fn(c, "pay", &runs), sentinel.WithWait(), sentinel.WithRerun(2))
		done <- outcome{res, err}
	}()
	require.Eventually(t, func() bool { return e.count("executions", "key = 'pay' AND waiters > 0") == 1 },
		20*time.Second, 5*time.Millisecond, "the waiter never waited")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	o := <-done
	require.NoError(t, o.err)
	require.False(t, o.res.Cached)
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, "ch_1", o.res.Value)
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 2, requests)
}

// failing is a fn that fails after its effect might have happened: the
// key is left executing with its lease ended.
func failing(runs *atomic.Int32) func(context.Context) (int, error) {
	return func(context.Context) (int, error) {
		runs.Add(1)
		return 0, errors.New("provider timed out")
	}
}

// Who decides: a key is re-run only when both the caller that finds it and
// the attempt that stopped gave WithRerun, within both bounds.
func TestRerunNeedsBothSides(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var runs atomic.Int32
	ok := func(context.Context) (int, error) { runs.Add(1); return 7, nil }

	// Stopped without WithRerun: a caller with it gets ErrUncertain.
	_, err := sentinel.Once(ctx, c, "plain", failing(&runs))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.NotContains(t, err.Error(), "WithRerun")
	_, err = sentinel.Once(ctx, c, "plain", ok, sentinel.WithRerun(5))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.EqualValues(t, 1, runs.Load())

	// Stopped with WithRerun: a caller without it gets ErrUncertain, told
	// that a caller with it runs the key again; then one with it does.
	runs.Store(0)
	_, err = sentinel.Once(ctx, c, "declared", failing(&runs), sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorContains(t, err, "as attempt 2 of at most 3")
	ex, err := c.Inspect(ctx, "declared")
	require.NoError(t, err)
	require.True(t, ex.Rerunnable())
	_, err = sentinel.Once(ctx, c, "declared", ok)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorContains(t, err, "a caller with WithRerun")
	// A caller whose own bound is reached does not re-run it either.
	_, err = sentinel.Once(ctx, c, "declared", ok, sentinel.WithRerun(1))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.EqualValues(t, 1, runs.Load())
	res, err := sentinel.Once(ctx, c, "declared", ok, sentinel.WithRerun(3))
	require.NoError(t, err)
	require.Equal(t, 7, res.Value)
	require.EqualValues(t, 2, runs.Load())

	// A re-run lowers the key's bound to its caller's: WithRerun(5) first,
	// a re-run with WithRerun(2) fails too, and the key is uncertain for a
	// WithRerun(5) caller.
	runs.Store(0)
	_, err = sentinel.Once(ctx, c, "lowered", failing(&runs), sentinel.WithRerun(5))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "lowered", failing(&runs), sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err = c.Inspect(ctx, "lowered")
	require.NoError(t, err)
	require.Equal(t, 2, ex.Attempt)
	require.Equal(t, 2, ex.MaxAttempts)
	require.False(t, ex.Rerunnable())
	_, err = sentinel.Once(ctx, c, "lowered", ok, sentinel.WithRerun(5))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.EqualValues(t, 2, runs.Load())
}

// fn's ctx carries its attempt and a stable effect key; a Retryable
// hand-back keeps the attempt; a re-run adds one.
func TestRerunAttemptAndEffectKey(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	type seen struct {
		attempt int
		effect  string
		token   int64
	}
	var got []seen
	fn := func(fail error) func(context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			tok, _ := sentinel.TokenFromContext(ctx)
			got = append(got, seen{sentinel.Attempt(ctx), sentinel.EffectKey(ctx), tok})
			return 1, fail
		}
	}
	_, err := sentinel.Once(ctx, c, "k", fn(sentinel.Retryable(errors.New("declined"))), sentinel.WithRerun(4))
	require.Error(t, err)
	_, err = sentinel.Once(ctx, c, "k", fn(errors.New("timed out")), sentinel.WithRerun(4))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "k", fn(nil), sentinel.WithRerun(4))
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Equal(t, []int{1, 1, 2}, []int{got[0].attempt, got[1].attempt, got[2].attempt})
	require.Equal(t, got[0].effect, got[1].effect)
	require.Equal(t, got[0].effect, got[2].effect)
	require.Less(t, got[0].token, got[1].token)
	require.Less(t, got[1].token, got[2].token)
	require.Regexp(t, regexp.MustCompile(`^se1-[0-9a-f]{32}$`), got[0].effect)
	require.Equal(t, sentinel.EffectKeyOf("default", "k"), got[0].effect)

	// Other keys, namespaces, and the (namespace, key) split all differ.
	keys := map[string]bool{got[0].effect: true}
	for _, nk := range [][2]string{{"default", "k2"}, {"other", "k"}, {"defaul", "tk"}, {"default\x00k", ""}} {
		ek := sentinel.EffectKeyOf(nk[0], nk[1])
		require.False(t, keys[ek], "%q/%q", nk[0], nk[1])
		keys[ek] = true
	}
	require.Empty(t, sentinel.EffectKey(ctx))
	require.Zero(t, sentinel.Attempt(ctx))
}

// WithRerun is validated before anything is written and applies to Once
// only.
func TestWithRerunInvalid(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	fn := func(context.Context) (int, error) { t.Error("fn ran"); return 0, nil }
	for _, n := range []int{0, -1, 1 << 40} {
		_, err := sentinel.Once(ctx, c, "k", fn, sentinel.WithRerun(n))
		require.ErrorIs(t, err, sentinel.ErrInvalid, "WithRerun(%d)", n)
		// The message names the range: a bound too large was told
		// "must be at least 1".
		require.Contains(t, err.Error(), "must be 1 to 2147483647", "WithRerun(%d)", n)
	}
	_, err := sentinel.OnceTx(ctx, c, "k", func(context.Context, pgx.Tx) (int, error) { t.Error("fn ran"); return 0, nil },
		sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Lease(ctx, "k", sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Prune(ctx, time.Hour, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	require.Zero(t, e.count("executions", ""))
}

// The claim statement, which is also a replay's only statement, takes no
// row lock, assigns no transaction id (so writes no WAL, not even a commit
// record) and mints no token for a completed key, nor for one in progress.
func TestClaimReplayWritesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	held := make(chan struct{})
	release := make(chan struct{})
	busyDone := make(chan struct{})
	go func() {
		defer close(busyDone)
		_, _ = sentinel.Once(ctx, c, "busy", func(context.Context) (int, error) {
			close(held)
			<-release
			return 1, nil
		})
	}()
	<-held
	stopBusy := sync.OnceFunc(func() { close(release); <-busyDone })
	defer stopBusy()
	var seq0 int64
	require.NoError(t, admin.QueryRow(ctx, "SELECT last_value FROM "+e.table("fencing_token")).Scan(&seq0))
	for _, key := range []string{"done", "busy"} {
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		var claimed bool
		var state string
		rows, err := tx.Query(ctx, sentinel.ClaimSQL(c), "default", key, "executing", "someone", "h", 1,
			int64(3_000_000), int64(3_000_000), nil, 5, int64(0))
		require.NoError(t, err)
		require.True(t, rows.Next())
		vals, err := rows.Values()
		require.NoError(t, err)
		rows.Close()
		claimed, state = vals[0] != nil, vals[3].(string) // the packed claimed row, NULL when nothing was claimed
		require.False(t, claimed, key)
		require.NotEqual(t, "claimed", state)
		var xid *string
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_catalog.pg_current_xact_id_if_assigned()::text").Scan(&xid))
		require.Nil(t, xid, "%s: the claim statement assigned a transaction id", key)
		// No row lock: another transaction locks the row at once.
		other, err := admin.Begin(ctx)
		require.NoError(t, err)
		_, err = other.Exec(ctx, "SELECT 1 FROM "+e.table("executions")+" WHERE key = $1 FOR UPDATE NOWAIT", key)
		require.NoError(t, err, key)
		require.NoError(t, other.Rollback(ctx))
		require.NoError(t, tx.Rollback(ctx))
	}
	var seq1 int64
	require.NoError(t, admin.QueryRow(ctx, "SELECT last_value FROM "+e.table("fencing_token")).Scan(&seq1))
	require.Equal(t, seq0, seq1, "no token minted")

	// And as Once sends it: 300 replays write no WAL. (Other work on the
	// server may write some in a window: one clean window of three will do;
	// the busy key's heartbeat is stopped first.)
	stopBusy()
	var walBytes []int64
	for range 3 {
		var before, after string
		require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&before))
		for range 300 {
			res, err := sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 2, nil })
			require.NoError(t, err)
			require.True(t, res.Cached)
		}
		require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan(&after))
		var n int64
		require.NoError(t, admin.QueryRow(ctx, "SELECT pg_catalog.pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint", after, before).Scan(&n))
		if walBytes = append(walBytes, n); n == 0 {
			return
		}
	}
	t.Fatalf("300 replays wrote WAL in every window: %v bytes", walBytes)
}

// Re-runs that queue in the coalescer go out in one set statement and are
// decided as the single statement decides them: a rerunnable key with
// WithRerun runs again (attempt 2, a rerun event), the same key for a
// caller without the option is uncertain, a key whose attempts are used up
// is uncertain, and two WithRerun callers of one key run it once.
func TestCoalescedReruns(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, _ := coalescingClient(t, e, nil)
	var runs atomic.Int32
	fail := failing(&runs)
	for _, k := range []string{"again", "plain", "spent", "twice"} {
		_, err := sentinel.Once(ctx, c, k, fail, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	_, err := sentinel.Once(ctx, c, "spent", fail, sentinel.WithRerun(2)) // attempt 2 of 2 fails too
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	first := map[string]int64{}
	for _, k := range []string{"again", "twice"} {
		ex, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		first[k] = ex.Token
	}
	runs.Store(0)

	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	type outcome struct {
		name string
		res  sentinel.Result[int]
		err  error
	}
	out := make(chan outcome, 5)
	call := func(name, key string, opts ...sentinel.Option) {
		go func() {
			res, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { runs.Add(1); return 7, nil }, opts...)
			out <- outcome{name, res, err}
		}()
	}
	call("again", "again", sentinel.WithRerun(2))
	call("plain", "plain")
	call("spent", "spent", sentinel.WithRerun(2))
	call("twice-1", "twice", sentinel.WithRerun(2))
	call("twice-2", "twice", sentinel.WithRerun(2))
	waitQueued(t, queued, sentinel.CoClaim, 5)
	setsBefore := sentinel.CoSets(c)
	release()
	got := map[string]outcome{}
	for range 5 {
		o := <-out
		got[o.name] = o
	}
	require.Greater(t, sentinel.CoSets(c), setsBefore, "the queued claims went out as a set statement")
	require.NoError(t, got["again"].err)
	require.Equal(t, 7, got["again"].res.Value)
	requireRerunEvent(t, c, "again", 2, first["again"])
	require.ErrorIs(t, got["plain"].err, sentinel.ErrUncertain)
	require.ErrorIs(t, got["spent"].err, sentinel.ErrUncertain)
	ok := 0
	for _, name := range []string{"twice-1", "twice-2"} {
		o := got[name]
		if o.err == nil {
			ok++
			continue
		}
		require.ErrorIs(t, o.err, sentinel.ErrInProgress, name)
	}
	require.GreaterOrEqual(t, ok, 1)
	requireRerunEvent(t, c, "twice", 2, first["twice"])
	require.Equal(t, 1, e.count("events", "key = 'twice' AND event = 'rerun'"), "re-run once")
	require.EqualValues(t, 2, runs.Load(), "fn ran for again and for twice, once each")
}

// In a re-run an earlier attempt may have had its effect, so the key is
// never handed back as claimed (which would let a caller without WithRerun
// run it): a Retryable re-run leaves it for the next re-run, as does a
// re-run claim given back because its caller's ctx ended before fn ran.
// An operator's ResetToClaimed starts the count again.
func TestRerunNeverHandsBackAsClaimed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	var runs atomic.Int32
	_, err := sentinel.Once(ctx, c, "k", failing(&runs), sentinel.WithRerun(5))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	// Attempt 2 says its own run had no effect: the key stays stopped.
	_, err = sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) {
		require.Equal(t, 2, sentinel.Attempt(ctx))
		return 0, sentinel.Retryable(errors.New("declined before sending"))
	}, sentinel.WithRerun(5))
	require.True(t, sentinel.IsRetryable(err))
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State)
	require.True(t, ex.Rerunnable())
	plain := func(context.Context) (int, error) {
		t.Error("a caller without WithRerun ran a key an earlier attempt may have charged")
		return 0, nil
	}
	_, err = sentinel.Once(ctx, c, "k", plain)
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	// A re-run claim whose caller's ctx ended before fn ran is given back
	// the same way.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = sentinel.Once(cctx, c, "k", plain, sentinel.WithRerun(5))
	require.Error(t, err)
	ex, err = c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State, "given back")
	_, err = sentinel.Once(ctx, c, "k", plain)
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	res, err := sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) { return sentinel.Attempt(ctx), nil }, sentinel.WithRerun(5))
	require.NoError(t, err)
	require.GreaterOrEqual(t, res.Value, 3)

	// After an operator's reset the next run is attempt 1 again.
	_, err = sentinel.Once(ctx, c, "r", failing(&runs), sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "r", failing(&runs), sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	rec, err := c.Reconcile(ctx, "r")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctx, "r", sentinel.WithToken(rec.Token)))
	res, err = sentinel.Once(ctx, c, "r", func(ctx context.Context) (int, error) { return sentinel.Attempt(ctx), nil })
	require.NoError(t, err)
	require.Equal(t, 1, res.Value)
}

// Two claims of one rerunnable key in one coalesced batch, the first by a
// caller whose own WithRerun bound is used up, the second by one whose is
// not: the second re-runs the key, as a claim statement of its own would.
// The batch offered the key to its first WithRerun claim only, which could
// not take it, and the second was told ErrInProgress ("another worker is
// running it") for a key nobody ran.
func TestCoalescedRerunGoesToTheClaimThatMayTakeIt(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c, _ := coalescingClient(t, e, nil)
	var runs atomic.Int32
	fail := failing(&runs)
	for range 2 {
		_, err := sentinel.Once(ctx, c, "k", fail, sentinel.WithRerun(3))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 2, ex.Attempt)
	require.True(t, ex.Rerunnable())

	queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
	type outcome struct {
		res sentinel.Result[int]
		err error
	}
	call := func(bound int) chan outcome {
		out := make(chan outcome, 1)
		go func() {
			res, err := sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) { return sentinel.Attempt(ctx), nil },
				sentinel.WithRerun(bound))
			out <- outcome{res, err}
		}()
		return out
	}
	spent := call(2) // attempt 2 reached its bound: it may not re-run the key
	waitQueued(t, queued, sentinel.CoClaim, 1)
	able := call(3)
	waitQueued(t, queued, sentinel.CoClaim, 2)
	release()
	s, a := <-spent, <-able
	require.ErrorIs(t, s.err, sentinel.ErrUncertain)
	require.NoError(t, a.err, "the claim whose bound allows a re-run")
	require.Equal(t, 3, a.res.Value, "attempt 3")
	requireRerunEvent(t, c, "k", 3, ex.Token)
}
