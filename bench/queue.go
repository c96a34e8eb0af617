package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/sentinel-coordination/sentinel"
)

// Fair queue lock: Sentinel's Turn against etcd's concurrency.Mutex (FIFO
// by revision; a single-node etcd on loopback), a blocking
// pg_advisory_lock, and Sentinel's Lease(WithWait). N contenders loop on
// one resource: lock, release at once, lock again. Figures per
// implementation and N:
//
//   - handover: from the holder's release call to the next holder's lock
//     returning, counted when the next holder was already waiting;
//   - turns per second;
//   - fairness: order inversions (a pair where one contender asked at
//     least fairEpsilon before another, yet was served after it) and the
//     worst wait from asking to being served;
//   - overlaps: a lock returning before the previous holder called
//     release (must be 0 for all).
//
// And a pool figure: 200 Turn waiters on one client whose pool has 4
// connections: the server connections the client uses while they wait,
// and the latency of unrelated queries on the same pool meanwhile.

const (
	nameQTurn     = "sentinel Turn"
	nameQLease    = "sentinel Lease(WithWait)"
	nameQAdvisory = "pg_advisory_lock (blocking)"
	nameQEtcd     = "etcd concurrency.Mutex"

	fairEpsilon  = 2 * time.Millisecond
	fairEpsilon2 = 25 * time.Millisecond // beyond the p99 of one request's own latency here
	queueWaiters = 200
)

// queueContenders are the contender counts measured.
var queueContenders = []int{1, 8, 32}

type queueContender struct {
	lock   func(ctx context.Context) (order int64, err error) // order: FIFO position when known, else 0
	unlock func(ctx context.Context) error
}

type queueImpl struct {
	name         string
	newContender func(ctx context.Context, i int) (*queueContender, error)
	close        func()
	note         string
}

// queueRun is one implementation at one N.
type queueRunResult struct {
	name        string
	n           int
	turns       int
	elapsed     time.Duration
	handover    sample
	inversions  int
	inversions2 int // with fairEpsilon2
	orderInv    int // inversions of the implementation's own FIFO order (ticket), -1: unknown
	worstWait   time.Duration
	overlaps    int
	note        string
}

type queueSection struct {
	runs        []*queueRunResult
	pool        *queuePoolResult
	etcdVersion string
	notes       []string
}

type queuePoolResult struct {
	waiters          int
	poolSize         int32
	maxTotalConns    int32
	maxAcquiredConns int32
	backends         int // server connections with the client's application_name while waiting
	unrelated        sample
	drain            time.Duration
	ttl              time.Duration
	window           time.Duration
	idleStmts        int64 // statements the client sent in window while all waited
}

type holdEvent struct {
	who           int
	req, acq, rel time.Time
	order         int64
}

func (b *bench) queueBench(ctx context.Context) (*queueSection, error) {
	sec := &queueSection{}
	res := "bench-queue/" + b.schema
	eps, stopEtcd, err := startEtcd(ctx)
	var etcdCli *clientv3.Client
	if err != nil {
		if !errors.Is(err, errNoEtcd) {
			return nil, err
		}
		sec.notes = append(sec.notes, err.Error())
	} else {
		defer stopEtcd()
		etcdCli, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		defer etcdCli.Close()
		if st, err := etcdCli.Status(ctx, eps[0]); err == nil {
			sec.etcdVersion = st.Version
		}
	}
	contenders := queueContenders
	if v, ok := os.LookupEnv("SENTINEL_BENCH_QUEUE_CONTENDERS"); ok { // e.g. "8"; "" runs only the pool figure
		contenders = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
				contenders = append(contenders, n)
			}
		}
	}
	for i, n := range contenders {
		impls := []func(context.Context) (*queueImpl, error){b.turnImpl(res, n), b.leaseWaitImpl(res, n), b.advisoryWaitImpl()}
		if i == len(contenders)-1 && n > 1 {
			// At the last contender count, Turn again beside as many
			// processes listening in the database as there are contenders.
			impls = slices.Insert(impls, 1, b.listenCrowdImpl(b.turnImpl(res, n), n))
		}
		if etcdCli != nil {
			impls = append(impls, etcdMutexImpl(etcdCli))
		}
		for _, mk := range impls {
			im, err := mk(ctx)
			if err != nil {
				return nil, err
			}
			b.progress("queue, %d contender(s): %s", n, im.name)
			r, err := b.runQueue(ctx, im, n, b.opts.duration)
			im.close()
			if err != nil {
				return nil, fmt.Errorf("%s, %d contenders: %w", im.name, n, err)
			}
			sec.runs = append(sec.runs, r)
		}
	}
	if sec.pool, err = b.queuePool(ctx, res+"/pool"); err != nil {
		return nil, fmt.Errorf("pool with %d waiters: %w", queueWaiters, err)
	}
	return sec, nil
}

// sentinelPool is the pool the Sentinel contenders of one run share: n+2
// connections, like every pool of the bench, so that drawing a ticket
// never queues for a connection.
func (b *bench) sentinelPool(ctx context.Context, n int) (*pgxpool.Pool, error) {
	return newPool(ctx, b.url, n+2, nil)
}

// clientsImpl is a queueImpl with a Sentinel client per contender on one
// pool of N+2; contender makes a contender's lock and unlock from its
// client.
func (b *bench) clientsImpl(name, note string, n int, contender func(c *sentinel.Client) *queueContender) func(context.Context) (*queueImpl, error) {
	return func(ctx context.Context) (*queueImpl, error) {
		pool, err := b.sentinelPool(ctx, n)
		if err != nil {
			return nil, err
		}
		var mu sync.Mutex
		var clients []*sentinel.Client
		im := &queueImpl{name: name, note: note}
		im.newContender = func(ctx context.Context, i int) (*queueContender, error) {
			c, err := sentinel.New(pool, &sentinel.Config{Schema: b.schema})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			clients = append(clients, c)
			mu.Unlock()
			return contender(c), nil
		}
		im.close = func() {
			for _, c := range clients {
				c.Close()
			}
			pool.Close()
		}
		return im, nil
	}
}

func (b *bench) turnImpl(res string, n int) func(context.Context) (*queueImpl, error) {
	return b.clientsImpl(nameQTurn, "a client per contender, one pool of N+2", n, func(c *sentinel.Client) *queueContender {
		var cur *sentinel.Turn
		return &queueContender{
			lock: func(ctx context.Context) (int64, error) {
				t, err := c.Turn(ctx, res)
				if err != nil {
					return 0, err
				}
				cur = t
				return t.Ticket(), nil
			},
			unlock: func(ctx context.Context) error { return cur.Release(ctx) },
		}
	})
}

// listenCrowdImpl is im with crowd more connections LISTENing, each on a
// channel of its own that nobody notifies, for the whole row: the
// LISTEN connections of as many other processes of a deployment that wait
// for something else. PostgreSQL up to 18 signals every listening
// backend of the database on every notifying commit, whatever its
// channels, and each one wakes to read the notification queue; the
// contenders' own clients share one pool, so one LISTEN connection.
func (b *bench) listenCrowdImpl(im func(context.Context) (*queueImpl, error), crowd int) func(context.Context) (*queueImpl, error) {
	return func(ctx context.Context) (*queueImpl, error) {
		q, err := im(ctx)
		if err != nil {
			return nil, err
		}
		var conns []*pgx.Conn
		closeRow := q.close
		closeAll := func() {
			for _, c := range conns {
				_ = c.Close(context.Background())
			}
			closeRow()
		}
		for i := range crowd {
			c, err := newConn(ctx, b.url, nil)
			if err != nil {
				closeAll()
				return nil, err
			}
			conns = append(conns, c)
			if _, err := c.Exec(ctx, fmt.Sprintf("LISTEN %s", pgx.Identifier{fmt.Sprintf("bench_crowd_%d_%d", time.Now().UnixNano(), i)}.Sanitize())); err != nil {
				closeAll()
				return nil, err
			}
		}
		q.name = fmt.Sprintf("%s, %d more processes listening", q.name, crowd)
		q.note = fmt.Sprintf("as %s, with %d more connections listening on channels nobody notifies", nameQTurn, crowd)
		q.close = closeAll
		return q, nil
	}
}

func (b *bench) leaseWaitImpl(res string, n int) func(context.Context) (*queueImpl, error) {
	return b.clientsImpl(nameQLease, "a client per contender, one pool of N+2; not a queue: no order", n, func(c *sentinel.Client) *queueContender {
		var cur *sentinel.Lease
		return &queueContender{
			lock: func(ctx context.Context) (int64, error) {
				l, err := c.Lease(ctx, res, sentinel.WithWait())
				cur = l
				return 0, err
			},
			unlock: func(ctx context.Context) error { return cur.Release(ctx) },
		}
	})
}

func (b *bench) advisoryWaitImpl() func(context.Context) (*queueImpl, error) {
	return func(ctx context.Context) (*queueImpl, error) {
		var mu sync.Mutex
		var conns []*pgx.Conn
		key := int64(0x5155455545) // "QUEUE"
		im := &queueImpl{name: nameQAdvisory, note: "a connection per contender, held while waiting"}
		im.newContender = func(ctx context.Context, i int) (*queueContender, error) {
			conn, err := newConn(ctx, b.url, nil)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			return &queueContender{
				lock: func(ctx context.Context) (int64, error) {
					_, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key)
					return 0, err
				},
				unlock: func(ctx context.Context) error {
					_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", key)
					return err
				},
			}, nil
		}
		im.close = func() {
			for _, c := range conns {
				_ = c.Close(context.Background())
			}
		}
		return im, nil
	}
}

func etcdMutexImpl(cli *clientv3.Client) func(context.Context) (*queueImpl, error) {
	return func(ctx context.Context) (*queueImpl, error) {
		var mu sync.Mutex
		var sessions []*concurrency.Session
		prefix := fmt.Sprintf("/bench-queue/%d/", time.Now().UnixNano())
		im := &queueImpl{name: nameQEtcd, note: "a session (lease, TTL 3s) per contender on one client; FIFO by key revision"}
		im.newContender = func(ctx context.Context, i int) (*queueContender, error) {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(3))
			if err != nil {
				return nil, err
			}
			mu.Lock()
			sessions = append(sessions, s)
			mu.Unlock()
			m := concurrency.NewMutex(s, prefix)
			return &queueContender{
				lock: func(ctx context.Context) (int64, error) {
					if err := m.Lock(ctx); err != nil {
						return 0, err
					}
					// The mutex's key revision is its place in line.
					resp, err := cli.Get(ctx, m.Key())
					if err != nil || len(resp.Kvs) == 0 {
						return 0, err
					}
					return resp.Kvs[0].CreateRevision, nil
				},
				unlock: func(ctx context.Context) error { return m.Unlock(ctx) },
			}, nil
		}
		im.close = func() {
			for _, s := range sessions {
				_ = s.Close()
			}
		}
		return im, nil
	}
}

// runQueue runs n contenders of im for d and computes the figures.
func (b *bench) runQueue(ctx context.Context, im *queueImpl, n int, d time.Duration) (*queueRunResult, error) {
	cs := make([]*queueContender, n)
	for i := range cs {
		c, err := im.newContender(ctx, i)
		if err != nil {
			return nil, err
		}
		cs[i] = c
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var mu sync.Mutex
	var evs []holdEvent
	var inside atomic.Int32
	var overlaps atomic.Int32
	// The measured window starts once every contender has had one turn
	// (and the warm-up has passed): the first requests of a run race to
	// open connections and sessions at once (32 pool connections at the
	// same moment, on 2 cores, take hundreds of milliseconds), which says
	// nothing about the queue in steady state. Only turns asked for in the
	// window count, for every implementation alike.
	var (
		firsts atomic.Int32
		warmNs atomic.Int64 // start of the window; 0 until every contender had a turn
	)
	running := func() bool {
		w := warmNs.Load()
		return w == 0 || time.Now().Before(time.Unix(0, w).Add(d))
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil && running() {
				// Bound each wait well beyond any figure we expect.
				lctx, lcancel := context.WithTimeout(ctx, time.Minute)
				req := time.Now()
				order, err := c.lock(lctx)
				acq := time.Now()
				lcancel()
				if err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("contender %d lock: %w", i, err))
					}
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				inside.Add(-1)
				rel := time.Now()
				if err := c.unlock(context.WithoutCancel(ctx)); err != nil {
					cancel(fmt.Errorf("contender %d unlock: %w", i, err))
					return
				}
				mu.Lock()
				evs = append(evs, holdEvent{who: i, req: req, acq: acq, rel: rel, order: order})
				mu.Unlock()
				if first {
					first = false
					if int(firsts.Add(1)) == len(cs) {
						warmNs.Store(time.Now().Add(b.opts.warmup).UnixNano())
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	warm := time.Unix(0, warmNs.Load())
	elapsed := time.Since(warm)
	kept := evs[:0]
	for _, e := range evs {
		if !e.req.Before(warm) {
			kept = append(kept, e)
		}
	}
	evs = kept
	r := &queueRunResult{name: im.name, n: n, turns: len(evs), elapsed: elapsed, note: im.note, overlaps: int(overlaps.Load()),
		handover: sample{stmts: -1, elapsed: elapsed}}
	sort.Slice(evs, func(i, j int) bool { return evs[i].acq.Before(evs[j].acq) })
	for i := 1; i < len(evs); i++ {
		prev, cur := evs[i-1], evs[i]
		if cur.acq.Before(prev.rel) {
			r.overlaps++
		}
		if n == 1 || cur.req.Before(prev.rel) {
			r.handover.lat = append(r.handover.lat, cur.acq.Sub(prev.rel))
		}
	}
	r.handover.ops = len(r.handover.lat)
	for _, e := range evs {
		r.worstWait = max(r.worstWait, e.acq.Sub(e.req))
	}
	r.inversions = inversions(evs, fairEpsilon)
	r.inversions2 = inversions(evs, fairEpsilon2)
	r.orderInv = -1
	if len(evs) > 0 && evs[0].order != 0 {
		r.orderInv = 0
		for i := 1; i < len(evs); i++ {
			if evs[i].order < evs[i-1].order {
				r.orderInv++
			}
		}
	}
	b.progress("  %-32s %3d contenders: %6d turns, %8.0f turns/s, handover p50 %-9s p99 %-9s order inversions %d, overtaken %d/%d, worst wait %s",
		im.name, n, r.turns, float64(r.turns)/elapsed.Seconds(), fmtDur(r.handover.pct(50)), fmtDur(r.handover.pct(99)),
		r.orderInv, r.inversions, r.inversions2, r.worstWait.Round(time.Millisecond))
	return r, nil
}

// inversions counts pairs (a, b) where a asked at least eps before b but
// was served after b. Events are sorted by acquisition.
func inversions(evs []holdEvent, eps time.Duration) int {
	n := len(evs)
	byReq := make([]int, n) // indices into evs (acquisition rank), in request order
	for i := range byReq {
		byReq[i] = i
	}
	sort.Slice(byReq, func(i, j int) bool { return evs[byReq[i]].req.Before(evs[byReq[j]].req) })
	tree := make([]int, n+1) // Fenwick tree over acquisition ranks
	addRank := func(i int) {
		for i++; i <= n; i += i & -i {
			tree[i]++
		}
	}
	prefix := func(i int) int { // count of added ranks < i
		s := 0
		for ; i > 0; i -= i & -i {
			s += tree[i]
		}
		return s
	}
	added, total, j := 0, 0, 0
	for _, b := range byReq {
		// Add every event that asked at least eps before b.
		for j < n && !evs[byReq[j]].req.After(evs[b].req.Add(-eps)) {
			addRank(byReq[j])
			added++
			j++
		}
		total += added - prefix(b+1) // asked earlier, served after b
	}
	return total
}

// queuePool measures queueWaiters Turn waiters on one client whose pool
// has 4 connections.
func (b *bench) queuePool(ctx context.Context, res string) (*queuePoolResult, error) {
	const app = "sentinel-bench-queue-pool"
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	tr := &tracer{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	const ttl = time.Second
	c, err := sentinel.New(pool, &sentinel.Config{Schema: b.schema, DefaultTTL: ttl})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pr := &queuePoolResult{waiters: queueWaiters, poolSize: cfg.MaxConns, unrelated: sample{stmts: -1}, ttl: ttl, window: 3 * ttl}
	b.progress("queue: %d waiters on a pool of %d", queueWaiters, cfg.MaxConns)
	holder, err := c.Turn(ctx, res)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, queueWaiters)
	var lastDone atomic.Int64
	for range queueWaiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := c.Turn(wctx, res)
			if err != nil {
				errs <- err
				return
			}
			if err := t.Release(wctx); err != nil {
				errs <- err
			}
			lastDone.Store(time.Now().UnixNano())
		}()
	}
	sampleStat := func() {
		st := pool.Stat()
		pr.maxTotalConns = max(pr.maxTotalConns, st.TotalConns())
		pr.maxAcquiredConns = max(pr.maxAcquiredConns, st.AcquiredConns())
	}
	for {
		sampleStat()
		q, err := c.Queue(ctx, res)
		if err != nil {
			return nil, err
		}
		if len(q.Waiting) == queueWaiters {
			break
		}
		select {
		case err := <-errs:
			return nil, err
		case <-time.After(10 * time.Millisecond):
		}
	}
	// All are waiting: what do they cost? Statements over a few TTLs
	// (heartbeats and re-checks), connections, and unrelated queries.
	// First let their first checks (200 statements through 4
	// connections) finish.
	time.Sleep(2 * ttl)
	n0 := tr.n.Load()
	time.Sleep(pr.window)
	pr.idleStmts = tr.n.Load() - n0
	if err := b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&pr.backends); err != nil {
		return nil, err
	}
	t0 := time.Now()
	for range 200 {
		s := time.Now()
		var one int
		if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return nil, err
		}
		pr.unrelated.lat = append(pr.unrelated.lat, time.Since(s))
		sampleStat()
	}
	pr.unrelated.ops, pr.unrelated.elapsed = len(pr.unrelated.lat), time.Since(t0)
	released := time.Now()
	if err := holder.Release(ctx); err != nil {
		return nil, err
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return nil, err
	}
	pr.drain = time.Unix(0, lastDone.Load()).Sub(released)
	b.progress("  backends %d, pool max %d/%d, %d statements in %s while waiting, unrelated SELECT 1 p99 %s, drained in %s", pr.backends,
		pr.maxTotalConns, pr.poolSize, pr.idleStmts, pr.window, fmtDur(pr.unrelated.pct(99)), pr.drain.Round(time.Millisecond))
	return pr, nil
}

func (s *queueSection) get(name string, n int) *queueRunResult {
	if s == nil {
		return nil
	}
	for _, r := range s.runs {
		if r.name == name && r.n == n {
			return r
		}
	}
	return nil
}

func (s *queueSection) markdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## Fair queue lock\n\n")
	p("N contenders loop on one resource: lock, release at once, lock again; only turns asked for once every contender had one and the warm-up (-warmup) passed count, for every implementation (the first requests race to open connections). Handover: from the holder's release call to the next holder's lock returning (when that one was already waiting; with 1 contender, release to re-lock). Ticket-order inversions: turns served out of the implementation's own FIFO order (Turn: ticket; etcd: key create revision), the exact fairness check. Overtaken: pairs where one contender called lock at least %s (or %s) before another, yet was served after it; this also counts the jitter of the request's own trip to the server before it is placed in line (a Turn's ticket draw), so small counts at %s are request latency, not queue jumping. Overlaps: a lock returning before the previous holder called release.", fairEpsilon, fairEpsilon2, fairEpsilon)
	if s.etcdVersion != "" {
		p(" etcd server %s on loopback.", s.etcdVersion)
	}
	p("\n\n")
	t := newTable(">contenders", "implementation", ">turns/s", ">handover p50", ">p99", ">ticket-order inversions", ">overtaken ("+fairEpsilon.String()+")", ">overtaken ("+fairEpsilon2.String()+")", ">worst wait", ">overlaps", "note")
	for _, r := range s.runs {
		oi := "n/a"
		if r.orderInv >= 0 {
			oi = fmt.Sprint(r.orderInv)
		}
		t.add(fmt.Sprint(r.n), r.name, fmtRate(float64(r.turns)/r.elapsed.Seconds()), fmtDur(r.handover.pct(50)), fmtDur(r.handover.pct(99)),
			oi, fmt.Sprint(r.inversions), fmt.Sprint(r.inversions2), fmtDur(r.worstWait), fmt.Sprint(r.overlaps), r.note)
	}
	p("%s\n", t)
	if pr := s.pool; pr != nil {
		p("**%d Turn waiters on one client with a pool of %d connections** (TTL %s). While all %d wait: the server holds %d connection(s) for the client (its pool plus its one LISTEN connection); the pool peaked at %d open, %d in use; in a %s window starting 2 TTLs after the last ticket was drawn, the client sent %d statements (%.1f/s: heartbeats and re-checks); an unrelated `SELECT 1` on the same pool: p50 %s, p99 %s. After the holder released, all %d turns were served, one after the other, in %s. A blocking `pg_advisory_lock` needs one server connection per waiter: %d.\n\n",
			pr.waiters, pr.poolSize, pr.ttl, pr.waiters, pr.backends, pr.maxTotalConns, pr.maxAcquiredConns, pr.window, pr.idleStmts,
			float64(pr.idleStmts)/pr.window.Seconds(), fmtDur(pr.unrelated.pct(50)), fmtDur(pr.unrelated.pct(99)),
			pr.waiters, pr.drain.Round(time.Millisecond), pr.waiters)
	}
	for _, n := range s.notes {
		p("- %s\n", n)
	}
	if len(s.notes) > 0 {
		p("\n")
	}
	return b.String()
}

func (s *queueSection) targets() []target {
	if s == nil {
		return nil
	}
	var out []target
	inv := target{name: "queue: Turn ticket-order inversions and overlaps (all contender counts)", limit: "0", missing: true}
	total := 0
	for _, r := range s.runs {
		if r.name == nameQTurn && r.orderInv >= 0 {
			total += r.orderInv + r.overlaps
			inv.missing = false
		}
	}
	inv.measured, inv.ok = fmt.Sprint(total), total == 0
	out = append(out, inv)
	h := target{name: "queue: Turn handover p50, 8 contenders", limit: "< 5 ms", missing: true}
	if r := s.get(nameQTurn, 8); r != nil && r.handover.ops > 0 {
		d := r.handover.pct(50)
		h.measured, h.ok, h.missing = fmtDur(d), d < 5*time.Millisecond, false
	}
	out = append(out, h)
	out = append(out, s.handoverTargets()...)
	if pr := s.pool; pr != nil {
		limit := int(pr.poolSize) + 1
		out = append(out, target{name: fmt.Sprintf("queue: server connections with %d waiters", pr.waiters),
			measured: fmt.Sprint(pr.backends), limit: fmt.Sprintf("≤ pool size + 1 listener (%d)", limit), ok: pr.backends <= limit})
	}
	return out
}

// handoverTargets are the queue goals of issue 30, at 8 and 32 contenders,
// each against etcd's Mutex measured in the same run: Turn at least 3x its
// turns/s, Turn handover p50 at most 1 ms, Turn's worst wait no longer than
// etcd's, and Lease(WithWait) at least etcd's turns/s.
func (s *queueSection) handoverTargets() []target {
	var out []target
	rate := func(r *queueRunResult) float64 {
		if r == nil || r.elapsed <= 0 || r.turns == 0 {
			return math.NaN()
		}
		return float64(r.turns) / r.elapsed.Seconds()
	}
	for _, n := range []int{8, 32} {
		turn, lease, etcd := s.get(nameQTurn, n), s.get(nameQLease, n), s.get(nameQEtcd, n)
		if turn == nil && lease == nil {
			continue
		}
		out = append(out, ratioTarget(fmt.Sprintf("queue (issue 30): Turn turns/s vs etcd Mutex, %d contenders", n), rate(turn)/rate(etcd), 3, false))
		h := target{name: fmt.Sprintf("queue (issue 30): Turn handover p50, %d contenders", n), limit: "≤ 1 ms", missing: true}
		if turn != nil && turn.handover.ops > 0 {
			d := turn.handover.pct(50)
			h.measured, h.ok, h.missing = fmtDur(d), d <= time.Millisecond, false
		}
		out = append(out, h)
		w := target{name: fmt.Sprintf("queue (issue 30): Turn worst wait vs etcd Mutex, %d contenders", n), limit: "≤ etcd's",
			missing: turn == nil || etcd == nil || turn.turns == 0 || etcd.turns == 0}
		if !w.missing {
			w.measured = fmt.Sprintf("%s vs %s", fmtDur(turn.worstWait), fmtDur(etcd.worstWait))
			w.ok = turn.worstWait <= etcd.worstWait
		}
		out = append(out, w)
		out = append(out, ratioTarget(fmt.Sprintf("queue (issue 30): Lease(WithWait) turns/s vs etcd Mutex, %d contenders", n), rate(lease)/rate(etcd), 1, false))
	}
	return out
}
