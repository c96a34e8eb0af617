package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/netfault"
)

// Scenario 11: coalesced callers under faults (issue 20). Three clients,
// each with a pool of 3 connections and 32 Once goroutines plus 4 lease
// goroutines, so callers outnumber connections and the coalescer sends
// Once reads, claims and completions, and lease grants and releases, as set
// statements over arrays. Each client reaches the server
// through its own TCP proxy. While the load runs, faults hit one client at
// a time (connection resets, a blackhole shorter or longer than the TTL,
// pg_terminate_backend of all its backends, its listener included) or all
// of them (an immediate-mode restart), with quiet periods in between.
//
// Workload: Once on fresh keys (nobody else calls them), and on a shared,
// moving window of keys every goroutine of every client contends for,
// half of those calls WithWait, so callers wait for a key in progress and
// are woken by the NOTIFY of the statement that completes it, often a set
// statement. Lease goroutines acquire (waiting) shared keys, guard writes
// with VerifyToken, and release.
//
// Properties: a pgx tracer on every client's connections counts the set
// statements ("WITH ORDINALITY", by kind) and multi-statement batches,
// and there must be set statements; the Once audit (auditOnce, reconcileUncertain, auditFinal):
// no fn effect applied twice, every success durable with its effect logged
// exactly once and equal to the stored result, uncertain keys stay
// uncertain; every value returned (run or cached) is the value of the
// execution that holds the key; no wake-up missed: a WithWait caller
// returns within coWakeBound of the key's completion (completed_at, the
// database clock of the same host) unless a fault window overlaps the time
// from the completion to that bound (a missed NOTIFY shows as a wait until
// the holder's expiry, about the TTL); the lease history checks of
// leaseRun.check (porcupine, no overlap, guarded writes in token order).

const (
	coTTL       = 4 * time.Second
	coWakeBound = 1200 * time.Millisecond
	coClients   = 3
	coOnceG     = 32 // Once goroutines per client
	coLeaseG    = 4  // lease goroutines per client
	coWindow    = 6  // shared Once keys contended at a time
)

// Kinds of set statement, told apart by their input columns.
const (
	coSetRead = iota
	coSetClaim
	coSetFinish
	coSetGrant
	coSetRelease
	coSetKinds
)

var coSetNames = [coSetKinds]string{"read", "claim", "finish", "lease_grant", "lease_release"}

func coSetKind(sql string) int {
	switch {
	case strings.Contains(sql, "AS i(ns, key, n)"):
		return coSetRead
	case strings.Contains(sql, "AS i(ns, key, state, owner"):
		return coSetClaim
	case strings.Contains(sql, "to_state"):
		return coSetFinish
	case strings.Contains(sql, "AS i(ns, key, owner, host"):
		return coSetGrant
	case strings.Contains(sql, "AS i(ns, key, owner, token, channel"):
		return coSetRelease
	}
	return -1
}

// coTracer counts, on one client's connections, the coalescer's set
// statements (by kind, and the calls they carried) and multi-statement
// pgx.Batches.
type coTracer struct {
	sets                [coSetKinds]atomic.Int64
	otherSets           atomic.Int64 // WITH ORDINALITY statements of no known kind
	setCalls, maxSet    atomic.Int64
	batches, batchCalls atomic.Int64
	queries             atomic.Int64
	mu                  sync.Mutex
	finishedBySet       map[string]bool // keys a completion set statement carried
}

func (tr *coTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	tr.queries.Add(1)
	tr.count(d.SQL, d.Args)
	return ctx
}

// count records one statement if it is a set statement. The coalescer sends
// each set statement in a pgx.Batch after its plan settings, so statements
// are counted both here and from TraceBatchStart.
func (tr *coTracer) count(sql string, args []any) {
	if !strings.Contains(sql, "WITH ORDINALITY") {
		return
	}
	kind := coSetKind(sql)
	if kind < 0 {
		tr.otherSets.Add(1)
		return
	}
	tr.sets[kind].Add(1)
	if len(args) > 1 {
		if keys, ok := args[1].([]string); ok {
			n := int64(len(keys))
			tr.setCalls.Add(n)
			for {
				m := tr.maxSet.Load()
				if n <= m || tr.maxSet.CompareAndSwap(m, n) {
					break
				}
			}
			if kind == coSetFinish {
				tr.mu.Lock()
				for _, k := range keys {
					tr.finishedBySet[k] = true
				}
				tr.mu.Unlock()
			}
		}
	}
}

func (*coTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (tr *coTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	if d.Batch == nil {
		return ctx
	}
	if d.Batch.Len() > 1 {
		tr.batches.Add(1)
		tr.batchCalls.Add(int64(d.Batch.Len()))
	}
	for _, q := range d.Batch.QueuedQueries {
		tr.queries.Add(1)
		tr.count(q.SQL, q.Arguments)
	}
	return ctx
}

func (*coTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*coTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// coWait is one WithWait call that returned a cached result.
type coWait struct {
	key       string
	client    int
	token     int64
	call, ret time.Time
}

// coFault is one injected fault: [start, end] on the local wall clock.
type coFault struct {
	Kind       string
	Victim     int // -1: every client
	start, end time.Time
	Effect     int // connections reset or backends terminated
}

type coLoad struct {
	mu                sync.Mutex
	ran               map[string]int64 // key -> token of the call that ran fn and returned success
	keys              map[string]bool  // every Once key called
	waits             []coWait
	ops, cached       int
	uncertain, inProg int
	errs, waitErrs    int
	sharedNext        atomic.Int64
	maxWait           time.Duration // longest WithWait call that returned cached
}

func coFreshKey(c, g, n int) string { return fmt.Sprintf("cof%d-%02d-%06d", c, g, n) }
func coSharedKey(i int64) string    { return fmt.Sprintf("cos%07d", i) }

func (cl *coLoad) run(ctx context.Context, ci, gi int, client *sentinel.Client, pool *pgxpool.Pool, v *violations) {
	for n := 0; ctx.Err() == nil; {
		var k string
		wait := false
		if r := rand.IntN(10); r < 4 {
			k = coFreshKey(ci, gi, n)
			n++
		} else {
			next := cl.sharedNext.Load()
			if rand.IntN(8) == 0 {
				next = cl.sharedNext.Add(1)
			}
			k = coSharedKey(max(0, next-int64(rand.IntN(coWindow))))
			wait = r >= 7
		}
		var opts []sentinel.Option
		if wait {
			opts = append(opts, sentinel.WithWait())
		}
		fn := effectFn(pool, k, fmt.Sprintf("co%d-%d", ci, gi), 40*time.Millisecond, nil)
		call := time.Now()
		res, err := sentinel.Once(ctx, client, k, fn, opts...)
		ret := time.Now()
		cl.mu.Lock()
		cl.ops++
		cl.keys[k] = true
		switch {
		case err == nil:
			want := effect{Key: k, Token: res.Token, Digest: digest(k)}
			if res.Value != want {
				v.add("key %s: call returned %+v, not the value of execution %d (cached %v)", k, res.Value, res.Token, res.Cached)
			}
			if res.Cached {
				cl.cached++
				if wait {
					cl.waits = append(cl.waits, coWait{key: k, client: ci, token: res.Token, call: call, ret: ret})
					cl.maxWait = max(cl.maxWait, ret.Sub(call))
				}
			} else {
				if prev, ok := cl.ran[k]; ok {
					v.add("key %s: fn ran for two calls that returned success (tokens %d, %d)", k, prev, res.Token)
				}
				cl.ran[k] = res.Token
			}
		case errors.Is(err, sentinel.ErrUncertain):
			cl.uncertain++
		case errors.Is(err, sentinel.ErrInProgress):
			cl.inProg++
		case ctx.Err() != nil:
		default:
			cl.errs++
			if wait {
				cl.waitErrs++
			}
		}
		cl.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			_ = sleepCtx(ctx, time.Duration(5+rand.IntN(20))*time.Millisecond)
		}
	}
}

func TestCoalescedCallersUnderFaults(t *testing.T) {
	faults, quiet := 4, 4*time.Second
	if prof().Name == "long" {
		faults, quiet = 32, 5*time.Second
	}
	ctx := ctxT(t, 30*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	target := fmt.Sprintf("127.0.0.1:%d", cl.Port())
	var v violations
	lr := newLeaseRun(admin)
	load := &coLoad{ran: map[string]int64{}, keys: map[string]bool{}}

	proxies := make([]*netfault.Proxy, coClients)
	tracers := make([]*coTracer, coClients)
	clients := make([]*sentinel.Client, coClients)
	pools := make([]*pgxpool.Pool, coClients)
	for i := range coClients {
		px, err := netfault.Listen(target)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		proxies[i] = px
		tr := &coTracer{finishedBySet: map[string]bool{}}
		tracers[i] = tr
		url := fmt.Sprintf("postgres://postgres@%s/sentinel?sslmode=disable", px.Addr())
		pools[i] = newPool(t, url, func(c *pgxpool.Config) {
			c.MaxConns = 3
			c.ConnConfig.ConnectTimeout = 2 * time.Second
			c.ConnConfig.Tracer = tr
			c.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("coalesce%d", i)
		})
		clients[i] = newClient(t, pools[i], sentinel.Config{DefaultTTL: coTTL, WaitRecheck: time.Minute,
			Owner: fmt.Sprintf("co%d", i)})
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var wg sync.WaitGroup
	var leaseActors []*actor
	for ci := range coClients {
		for gi := range coOnceG {
			wg.Add(1)
			go func() { defer wg.Done(); load.run(loadCtx, ci, gi, clients[ci], pools[ci], &v) }()
		}
		for j := range coLeaseG {
			a := &actor{
				id: ci*coLeaseG + j, pool: pools[ci], client: clients[ci],
				keys:          []string{"col-a", "col-b", "col-c", "col-d"},
				hold:          func() time.Duration { return time.Duration(20+rand.IntN(80)) * time.Millisecond },
				holdUntilDone: func() bool { return false },
				acquireWait:   3 * time.Second,
				writeEvery:    15 * time.Millisecond,
			}
			leaseActors = append(leaseActors, a)
			wg.Add(1)
			go func() { defer wg.Done(); lr.run(loadCtx, a) }()
		}
	}

	// Faults, one at a time, each after a quiet period.
	kinds := []string{"reset", "terminate", "blackhole", "restart"}
	terminate := func(victim int) int {
		var n int
		for attempt := 0; attempt < 3; attempt++ {
			err := admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1`, fmt.Sprintf("coalesce%d", victim)).Scan(&n)
			if err == nil {
				return n
			}
			time.Sleep(100 * time.Millisecond) // the admin pool's connection died in a restart
		}
		return n
	}
	var faultsDone []coFault
	for i := range faults {
		require.NoError(t, sleepCtx(ctx, quiet))
		f := coFault{Kind: kinds[i%len(kinds)], Victim: i % coClients, start: time.Now()}
		px := proxies[f.Victim]
		switch f.Kind {
		case "reset":
			for range 3 {
				f.Effect += px.ResetAll()
				time.Sleep(300 * time.Millisecond)
			}
		case "terminate":
			for range 2 {
				f.Effect += terminate(f.Victim)
				time.Sleep(300 * time.Millisecond)
			}
		case "blackhole":
			// Every other blackhole outlasts the TTL: the victim's
			// leases and executions are lost.
			d := coTTL / 2
			if (i/len(kinds))%2 == 1 {
				d = coTTL * 5 / 4
			}
			px.Blackhole()
			time.Sleep(d)
			px.Heal()
		case "restart":
			f.Victim = -1
			require.NoError(t, cl.Stop(ctx, "immediate"), "fault %d", i)
			if (i/len(kinds))%2 == 1 {
				time.Sleep(time.Second)
			}
			require.NoError(t, cl.Start(ctx), "fault %d", i)
		}
		f.end = time.Now()
		faultsDone = append(faultsDone, f)
	}
	require.NoError(t, sleepCtx(ctx, quiet))
	stopLoad()
	wg.Wait()

	lc := lr.check(t, ctx, &v)

	// Missed wake-ups, judged against the database's completion times.
	// A wait is judged when no fault window (extended by the time the
	// listener and pool take to reconnect) overlaps the span from the
	// key's completion to the bound: the NOTIFY then reaches a healthy
	// listener, or the listener's reconnect wakes every waiter.
	completedAt := map[string]struct {
		token int64
		at    time.Time
	}{}
	rows, err := admin.Query(ctx, `SELECT key, token, completed_at FROM sentinel.executions
		WHERE key LIKE 'cos%' AND state = 'completed'`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var tok int64
		var at time.Time
		require.NoError(t, rows.Scan(&k, &tok, &at))
		completedAt[k] = struct {
			token int64
			at    time.Time
		}{tok, at}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	bySet := map[string]bool{}
	for _, tr := range tracers {
		tr.mu.Lock()
		for k := range tr.finishedBySet {
			bySet[k] = true
		}
		tr.mu.Unlock()
	}
	overlapsFault := func(from, to time.Time) bool {
		for _, f := range faultsDone {
			post := 1500 * time.Millisecond
			if f.Kind == "restart" {
				post = 3 * time.Second
			}
			if from.Before(f.end.Add(post)) && to.After(f.start.Add(-200*time.Millisecond)) {
				return true
			}
		}
		return false
	}
	load.mu.Lock()
	var judged, judgedBySet, excluded int
	var maxJudged time.Duration
	for _, w := range load.waits {
		c, ok := completedAt[w.key]
		if !ok || c.token != w.token {
			v.add("key %s: a waiter got token %d, but the key is not completed under it", w.key, w.token)
			continue
		}
		if overlapsFault(c.at, c.at.Add(coWakeBound)) {
			excluded++
			continue
		}
		judged++
		if bySet[w.key] {
			judgedBySet++
		}
		from := c.at
		if w.call.After(from) {
			from = w.call
		}
		lat := w.ret.Sub(from)
		maxJudged = max(maxJudged, lat)
		if lat > coWakeBound {
			v.add("key %s: waiter on client %d returned %s after the key completed (bound %s; completed by a set statement: %v): missed wake-up",
				w.key, w.client, lat.Round(time.Millisecond), coWakeBound, bySet[w.key])
		}
	}
	keys := make([]string, 0, len(load.keys))
	for k := range load.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ran := load.ran
	load.mu.Unlock()

	// Calls cut off by the end of the load may have left live claims.
	time.Sleep(coTTL + 200*time.Millisecond)
	op := newClient(t, admin, sentinel.Config{DefaultTTL: coTTL, Owner: "operator"})
	a := auditOnce(t, ctx, admin, op, keys, ran, false, &v)
	v.require(t)
	rs := reconcileUncertain(t, ctx, admin, op, a.Uncertain, &v)
	var existing []string
	for _, k := range keys {
		if _, err := op.Inspect(ctx, k); err == nil {
			existing = append(existing, k)
		}
	}
	auditFinal(t, ctx, admin, existing, &v)
	v.require(t)

	sets := map[string]int64{}
	var setTotal, otherSets, setCalls, maxSet, batches, batchCalls, queries int64
	for _, tr := range tracers {
		for k := range coSetKinds {
			n := tr.sets[k].Load()
			sets[coSetNames[k]] += n
			setTotal += n
		}
		otherSets += tr.otherSets.Load()
		setCalls += tr.setCalls.Load()
		maxSet = max(maxSet, tr.maxSet.Load())
		batches += tr.batches.Load()
		batchCalls += tr.batchCalls.Load()
		queries += tr.queries.Load()
	}
	byKind := map[string]int{}
	for _, f := range faultsDone {
		byKind[f.Kind]++
	}
	var acquisitions int64
	for _, a := range leaseActors {
		acquisitions += a.successes.Load()
	}
	var pstats []netfault.Stats
	for _, px := range proxies {
		pstats = append(pstats, px.Stats())
	}
	load.mu.Lock()
	report(t, "coalesce", map[string]any{
		"faults": len(faultsDone), "faults_by_kind": byKind, "fault_list": faultsDone,
		"once_ops": load.ops, "once_keys": len(keys), "once_ran": len(ran), "once_cached": load.cached,
		"once_uncertain_calls": load.uncertain, "once_in_progress": load.inProg, "once_errors": load.errs,
		"uncertain_keys": len(a.Uncertain), "given_back": len(a.GivenBack), "forced": rs.Forced, "reset_and_rerun": rs.Reset,
		"waits_cached": len(load.waits), "wait_errors": load.waitErrs, "waits_judged": judged, "waits_judged_set_completed": judgedBySet,
		"waits_excluded_fault": excluded, "max_wait_ms": load.maxWait.Milliseconds(), "max_judged_wake_ms": maxJudged.Milliseconds(),
		"set_statements": setTotal, "set_statements_by_kind": sets, "set_statements_unknown_kind": otherSets,
		"set_calls": setCalls, "max_set_size": maxSet, "batches": batches, "batch_calls": batchCalls, "queries": queries,
		"lease_acquisitions": acquisitions, "lease_ops_checked": lc.Ops, "lease_grants": lc.Grants, "lease_lost": lc.Lost,
		"guarded_writes": lc.GuardedWrites, "porcupine": lc.Result, "proxy_stats": pstats, "violations": v.count(),
	})
	load.mu.Unlock()
	if setTotal == 0 {
		t.Errorf("no set statement was sent: coalescing never engaged")
	}
	if judged == 0 {
		t.Errorf("no WithWait caller was judged for a missed wake-up")
	}
}
