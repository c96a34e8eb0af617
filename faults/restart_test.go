package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Scenario 3: the server is restarted in immediate mode (crash recovery on
// start) again and again under Once and lease load; every other time it
// stays down for 1.5 TTL. Properties: no
// duplicate execution, no lost completion (a call that returned success
// has its completion in the table), clients recover without being
// restarted, tokens keep increasing across restarts, and the lease
// history is linearizable.

const restartTTL = time.Second

// onceLoad is a group of clients racing through the same key sequence.
type onceLoad struct {
	mu        sync.Mutex
	ran       map[string]int64 // key -> token of the call that returned success (fn ran)
	cached    int
	uncertain int
	errors    int
	maxKey    atomic.Int64
	// fn, if set, makes the Once fn actor a runs for key k (default:
	// effectFn with up to 10ms sleeps).
	fn func(a *onceActor, k string) func(context.Context) (effect, error)
	// callTimeout, if set, bounds each Once call (default: none, only the
	// load's context).
	callTimeout time.Duration
	// cachedTok: key -> token of a completion some call was replayed
	// (checkCached: it must be the key's completion at the end).
	cachedTok map[string]int64
}

// loadAudit is what audit found.
type loadAudit struct {
	keys  int              // keys the load reached
	ran   map[string]int64 // key -> token of the call that ran fn
	once  onceAudit
	recon reconcileStats
}

// audit runs the Once audit over every key the load reached, once it has
// stopped: auditOnce, then reconcileUncertain with op, then auditFinal on
// the keys that have a row (keys nobody resolved before the load stopped
// may have none).
func (ol *onceLoad) audit(t testing.TB, ctx context.Context, admin *pgxpool.Pool, op *sentinel.Client, v *violations) loadAudit {
	t.Helper()
	keys := make([]string, ol.maxKey.Load()+1)
	for i := range keys {
		keys[i] = restartKey(int64(i))
	}
	ol.mu.Lock()
	ran := ol.ran
	ol.mu.Unlock()
	a := loadAudit{keys: len(keys), ran: ran}
	a.once = auditOnce(t, ctx, admin, op, keys, ran, false, v)
	a.recon = reconcileUncertain(t, ctx, admin, op, a.once.Uncertain, v)
	var existing []string
	for _, k := range keys {
		if _, err := op.Inspect(ctx, k); err == nil {
			existing = append(existing, k)
		}
	}
	auditFinal(t, ctx, admin, existing, v)
	return a
}

// checkCached reports a key whose replayed completion is not its
// completion at the end: a completion that was read (a cached answer) and
// later lost, as when it was read from a primary that a failover
// discarded. db is readKeys' answer.
func (ol *onceLoad) checkCached(db map[string]*keyState, v *violations) {
	ol.mu.Lock()
	defer ol.mu.Unlock()
	for k, tok := range ol.cachedTok {
		s := db[k]
		if s == nil || s.state != sentinel.StateCompleted || s.token != tok {
			state, have := "absent", int64(0)
			if s != nil {
				state, have = string(s.state), s.token
			}
			v.add("key %s: a call was replayed the completion of token %d, but the key is %s under token %d (a completion read, then lost)", k, tok, state, have)
		}
	}
}

type onceActor struct {
	name   string
	client *sentinel.Client
	pool   *pgxpool.Pool
	lastOK atomic.Int64 // recorder time of the last successful call
	// lastOKStart is the recorder time at which the last successful call
	// started.
	lastOKStart atomic.Int64
}

func restartKey(i int64) string { return fmt.Sprintf("r%06d", i) }

// run calls Once for keys 0, 1, 2, ... in order, each until it resolves
// (ran, cached or uncertain), retrying in-progress keys and errors.
func (ol *onceLoad) run(ctx context.Context, a *onceActor, now func() int64, v *violations) {
	for i := int64(0); ctx.Err() == nil; i++ {
		k := restartKey(i)
		for {
			old := ol.maxKey.Load()
			if i <= old || ol.maxKey.CompareAndSwap(old, i) {
				break
			}
		}
		for ctx.Err() == nil {
			fn := effectFn(a.pool, k, a.name, 10*time.Millisecond, nil)
			if ol.fn != nil {
				fn = ol.fn(a, k)
			}
			cctx, cancel := ctx, context.CancelFunc(func() {})
			if ol.callTimeout > 0 {
				cctx, cancel = context.WithTimeout(ctx, ol.callTimeout)
			}
			started := now()
			res, err := sentinel.Once(cctx, a.client, k, fn)
			cancel()
			if err == nil {
				a.lastOK.Store(now())
				a.lastOKStart.Store(started)
				ol.mu.Lock()
				if res.Cached {
					ol.cached++
					if ol.cachedTok == nil {
						ol.cachedTok = map[string]int64{}
					}
					if prev, ok := ol.cachedTok[k]; ok && prev != res.Token {
						v.add("key %s: replayed two different completions (tokens %d, %d)", k, prev, res.Token)
					}
					ol.cachedTok[k] = res.Token
					if res.Value != (effect{Key: k, Token: res.Token, Digest: digest(k)}) {
						v.add("key %s: cached value %+v is not the value of its execution %d", k, res.Value, res.Token)
					}
				} else {
					if prev, ok := ol.ran[k]; ok {
						v.add("key %s: two calls returned success (tokens %d, %d)", k, prev, res.Token)
					}
					ol.ran[k] = res.Token
				}
				ol.mu.Unlock()
				break
			}
			if errors.Is(err, sentinel.ErrUncertain) {
				ol.mu.Lock()
				ol.uncertain++
				ol.mu.Unlock()
				break
			}
			if !errors.Is(err, sentinel.ErrInProgress) {
				ol.mu.Lock()
				ol.errors++
				ol.mu.Unlock()
			}
			_ = sleepCtx(ctx, 20*time.Millisecond)
		}
	}
}

func TestDatabaseRestart(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 20*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	var v violations

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	lr := newLeaseRun(admin)

	ol := &onceLoad{ran: map[string]int64{}}
	var onceActors []*onceActor
	for i := range 4 {
		pool := newPool(t, cl.URL(), func(c *pgxpool.Config) { c.MaxConns = 3 })
		a := &onceActor{name: fmt.Sprintf("once%d", i), pool: pool,
			client: newClient(t, pool, sentinel.Config{DefaultTTL: restartTTL, Owner: fmt.Sprintf("once%d", i)})}
		onceActors = append(onceActors, a)
		wg.Add(1)
		go func() { defer wg.Done(); ol.run(loadCtx, a, lr.rec.Now, &v) }()
	}
	var leaseActors []*actor
	for i := range 3 {
		pool := newPool(t, cl.URL(), func(c *pgxpool.Config) { c.MaxConns = 3 })
		a := &actor{
			id: i, pool: pool, keys: []string{"lease-a", "lease-b"},
			client: newClient(t, pool, sentinel.Config{DefaultTTL: restartTTL, WaitRecheck: 250 * time.Millisecond,
				Owner: fmt.Sprintf("lease%d", i)}),
			// Mostly short holds; one in six outlasts the TTL, so a
			// holder is often caught by a long outage and loses its lease
			// by its deadline, rather than giving it up first.
			hold: func() time.Duration {
				if rand.IntN(6) == 0 {
					return 2 * restartTTL
				}
				return time.Duration(20+rand.IntN(80)) * time.Millisecond
			},
			holdUntilDone: func() bool { return false },
			acquireWait:   3 * time.Second,
			writeEvery:    15 * time.Millisecond,
			backToBack:    i == 0, // guarded writes back to back (issue 17.2)
		}
		leaseActors = append(leaseActors, a)
		wg.Add(1)
		go func() { defer wg.Done(); lr.run(loadCtx, a) }()
	}

	type restartFacts struct {
		DowntimeMs, RecoveryMs  int64
		TokenBefore, TokenAfter int64
	}
	var facts []restartFacts
	lastToken := func() int64 {
		var n int64
		require.NoError(t, admin.QueryRow(ctx, `SELECT coalesce(max(token), 0) FROM (
			SELECT max(token) AS token FROM sentinel.leases UNION ALL SELECT max(token) FROM sentinel.executions) t`).Scan(&n))
		return n
	}
	for i := range p.Restarts {
		require.NoError(t, sleepCtx(ctx, time.Duration(1000+rand.IntN(1000))*time.Millisecond))
		before := lastToken()
		t0 := time.Now()
		// Odd restarts keep the server down past the TTL, so leases
		// are lost and running executions become uncertain.
		require.NoError(t, cl.Stop(ctx, "immediate"), "restart %d", i)
		if i%2 == 1 {
			time.Sleep(restartTTL * 3 / 2)
		}
		require.NoError(t, cl.Start(ctx), "restart %d", i)
		down := time.Since(t0)
		up := lr.rec.Now()
		// Every client recovers by itself: each makes progress again.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting []string
			for _, a := range onceActors {
				if a.lastOK.Load() <= up {
					waiting = append(waiting, a.name)
				}
			}
			for _, a := range leaseActors {
				if a.lastOK.Load() <= up {
					waiting = append(waiting, fmt.Sprintf("lease%d", a.id))
				}
			}
			if len(waiting) == 0 {
				break
			}
			if time.Now().After(deadline) {
				ol.mu.Lock()
				t.Fatalf("restart %d: clients %v made no progress within 30s of the server coming back (once errors %d, last key %s)",
					i, waiting, ol.errors, restartKey(ol.maxKey.Load()))
			}
			time.Sleep(10 * time.Millisecond)
		}
		rf := restartFacts{DowntimeMs: down.Milliseconds(), RecoveryMs: (lr.rec.Now() - up) / 1e6, TokenBefore: before}
		rf.TokenAfter = lastToken()
		if rf.TokenAfter <= before {
			v.add("restart %d: no token above %d granted after the restart (max %d)", i, before, rf.TokenAfter)
		}
		facts = append(facts, rf)
	}
	stopLoad()
	wg.Wait()

	lc := lr.check(t, ctx, &v)
	// Calls cut off by the end of the load may have left live claims.
	time.Sleep(restartTTL + 100*time.Millisecond)
	client := newClient(t, admin, sentinel.Config{DefaultTTL: restartTTL, Owner: "operator"})
	n := ol.maxKey.Load() + 1
	keys := make([]string, n)
	for i := range keys {
		keys[i] = restartKey(int64(i))
	}
	ol.mu.Lock()
	ran := ol.ran
	ol.mu.Unlock()
	a := auditOnce(t, ctx, admin, client, keys, ran, false, &v)
	v.require(t)
	rs := reconcileUncertain(t, ctx, admin, client, a.Uncertain, &v)
	// Keys nobody resolved before the load stopped may have no row.
	var existing []string
	for _, k := range keys {
		if _, err := client.Inspect(ctx, k); err == nil {
			existing = append(existing, k)
		}
	}
	auditFinal(t, ctx, admin, existing, &v)
	v.require(t)

	var acquisitions int64
	for _, a := range leaseActors {
		acquisitions += a.successes.Load()
	}
	report(t, "restart", map[string]any{
		"restarts": len(facts), "restart_facts": facts, "once_keys": n, "once_ran": len(ran), "once_cached": ol.cached,
		"once_uncertain": len(a.Uncertain), "forced": rs.Forced, "reset_and_rerun": rs.Reset, "once_errors_retried": ol.errors,
		"lease_acquisitions": acquisitions, "lease_ops_checked": lc.Ops, "lease_grants": lc.Grants, "lease_lost": lc.Lost, "lease_release_unknown": lc.ReleaseUnknown,
		"guarded_writes": lc.GuardedWrites, "porcupine": lc.Result, "violations": v.count(),
	})
}
