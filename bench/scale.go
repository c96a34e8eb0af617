package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
)

// renewStat is one batched renewal statement seen by the tracer.
type renewStat struct {
	start  time.Time
	dur    time.Duration
	leases int // -1 when the batch size could not be read
	err    error
}

type renewStart struct {
	at     time.Time
	leases int
}

// renewWatch records the client's renewal statements, recognised by their
// unnest of the lease arrays (the batch size is the length of the key
// array, the second argument).
type renewWatch struct {
	mu       sync.Mutex
	stats    []renewStat
	inFlight int // renewal statements started and not yet ended
	wake     chan struct{}
}

func newRenewWatch() *renewWatch { return &renewWatch{wake: make(chan struct{})} }

func (r *renewWatch) onStart(sql string, args []any) any {
	if !strings.Contains(sql, "unnest(") {
		return nil
	}
	n := -1
	if len(args) > 1 {
		if keys, ok := args[1].([]string); ok {
			n = len(keys)
		}
	}
	r.mu.Lock()
	r.inFlight++
	r.mu.Unlock()
	return renewStart{at: time.Now(), leases: n}
}

func (r *renewWatch) onEnd(v any, err error) {
	s := v.(renewStart)
	r.mu.Lock()
	r.stats = append(r.stats, renewStat{start: s.at, dur: time.Since(s.at), leases: s.leases, err: err})
	r.inFlight--
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// waitFor blocks until a renewal statement that satisfies ok ends after
// index from, and returns its index.
func (r *renewWatch) waitFor(ctx context.Context, from int, timeout time.Duration, ok func(renewStat) bool) (int, error) {
	found := -1
	err := waitUntil(ctx, timeout, func() (bool, <-chan struct{}) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i := from; i < len(r.stats); i++ {
			if ok(r.stats[i]) {
				found = i
				return true, nil
			}
		}
		from = len(r.stats)
		return false, r.wake
	})
	if err != nil {
		return 0, fmt.Errorf("no matching renewal statement: %w", err)
	}
	return found, nil
}

// settle blocks until no renewal statement is in flight, so a snapshot
// holds every statement that started before the call.
func (r *renewWatch) settle(ctx context.Context, timeout time.Duration) error {
	err := waitUntil(ctx, timeout, func() (bool, <-chan struct{}) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.inFlight == 0, r.wake
	})
	if err != nil {
		return fmt.Errorf("a renewal statement was still running: %w", err)
	}
	return nil
}

// waitUntil calls cond until it reports done, waiting between calls for the
// channel it returned to close, for at most timeout.
func waitUntil(ctx context.Context, timeout time.Duration, cond func() (done bool, wake <-chan struct{})) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		done, wake := cond()
		if done {
			return nil
		}
		select {
		case <-wake:
		case <-t.C:
			return fmt.Errorf("not within %s", timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *renewWatch) snapshot() []renewStat {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stats)
}

// scaleResult is what holding many leases in one client costs.
type scaleResult struct {
	leases        int
	renewEvery    time.Duration
	window        time.Duration
	stmtsInWindow int64
	renewStmts    []renewStat // renewal statements that started in the window
	ticks         [][]renewStat
	heapBase      uint64 // HeapAlloc with one lease held
	heapHeld      uint64 // HeapAlloc with all leases held
	gBase, gHeld  int    // goroutines with one lease / all leases held
	lost          int    // leases that ended while held
	acquireTime   time.Duration
	closeTime     time.Duration
	closeStmts    int64
	leftHeld      int // leases still live in the database after Close
}

func (s *scaleResult) bytesPerLease() float64 {
	if s.leases < 2 || s.heapHeld < s.heapBase {
		return 0
	}
	return float64(s.heapHeld-s.heapBase) / float64(s.leases-1)
}

func (s *scaleResult) maxStmtsPerTick() int {
	m := 0
	for _, t := range s.ticks {
		m = max(m, len(t))
	}
	return m
}

// allLeasesEveryStmt reports whether every renewal statement in the window
// carried all the leases.
func (s *scaleResult) allLeasesEveryStmt() bool {
	if len(s.renewStmts) == 0 {
		return false
	}
	for _, r := range s.renewStmts {
		if r.leases != s.leases {
			return false
		}
	}
	return true
}

func (s *scaleResult) renewLatency() sample {
	var out sample
	for _, r := range s.renewStmts {
		out.lat = append(out.lat, r.dur)
	}
	out.ops = len(out.lat)
	return out
}

// heapNow returns HeapAlloc after two full collections.
func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// heldLeases holds opts.leases leases in one client with default settings
// but the TTL (-lease-ttl, default Sentinel's 3s, renewed every TTL/3) and measures statements per heartbeat tick,
// client heap per held lease and goroutines.
func (b *bench) heldLeases(ctx context.Context) (*scaleResult, error) {
	n := b.opts.leases
	rw := newRenewWatch()
	tr := &tracer{onStart: rw.onStart, onEnd: rw.onEnd}
	pool, err := newPool(ctx, b.url, b.maxConns, tr)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	c, err := sentinel.New(pool, &sentinel.Config{Schema: b.schema, Namespace: "held-leases", DefaultTTL: b.opts.leaseTTL})
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	cfg := c.Config()
	res := &scaleResult{leases: n, renewEvery: min(cfg.HeartbeatInterval, cfg.DefaultTTL/3)}
	const par = 8

	// Warm the pool (every connection open, statements prepared).
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for w := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				l, err := c.Lease(ctx, fmt.Sprintf("warm-%d-%d", w, i))
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}

	held := make([]*sentinel.Lease, n)
	if held[0], err = c.Lease(ctx, "held-0"); err != nil {
		return nil, err
	}
	time.Sleep(50 * time.Millisecond)
	res.heapBase = heapNow()
	res.gBase = runtime.NumGoroutine()

	b.progress("holding %d leases in one client", n)
	start := time.Now()
	var next atomic.Int64
	next.Store(1)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				l, err := c.Lease(ctx, "held-"+strconv.Itoa(i))
				if err != nil {
					errs <- err
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	res.acquireTime = time.Since(start)
	select {
	case err := <-errs:
		return nil, err
	default:
	}

	// Converged: one statement renews all n.
	conv, err := rw.waitFor(ctx, 0, 10*res.renewEvery+10*time.Second, func(r renewStat) bool { return r.err == nil && r.leases == n })
	if err != nil {
		return nil, fmt.Errorf("heartbeats never renewed all %d leases in one statement: %w", n, err)
	}

	// Memory and goroutines, measured just after a tick (no renewal in
	// flight); the lowest of three readings.
	from := conv + 1
	for range 3 {
		i, err := rw.waitFor(ctx, from, 10*res.renewEvery, func(renewStat) bool { return true })
		if err != nil {
			return nil, err
		}
		from = i + 1
		time.Sleep(min(res.renewEvery/10, 50*time.Millisecond))
		h := heapNow()
		if res.heapHeld == 0 || h < res.heapHeld {
			res.heapHeld = h
		}
		res.gHeld = runtime.NumGoroutine()
	}

	// Statements per tick over a window of whole renewal intervals.
	res.window = max(b.opts.duration, 5*res.renewEvery)
	b.progress("counting statements for %s", res.window)
	n0 := tr.n.Load()
	w0 := time.Now()
	time.Sleep(res.window)
	res.stmtsInWindow = tr.n.Load() - n0
	w1 := time.Now()
	// A renewal that started in the window may still be running: wait for
	// it, or the window would count a statement without its renewal.
	if err := rw.settle(ctx, 10*res.renewEvery); err != nil {
		return nil, err
	}
	for _, r := range rw.snapshot() {
		if !r.start.Before(w0) && r.start.Before(w1) {
			res.renewStmts = append(res.renewStmts, r)
		}
	}
	// A tick is a burst of renewal statements; bursts are a renewal
	// interval apart.
	for i, r := range res.renewStmts {
		if i == 0 || r.start.Sub(res.renewStmts[i-1].start) > res.renewEvery/2 {
			res.ticks = append(res.ticks, nil)
		}
		res.ticks[len(res.ticks)-1] = append(res.ticks[len(res.ticks)-1], r)
	}
	for _, l := range held {
		if l.Err() != nil {
			res.lost++
		}
	}

	// Close releases what the client holds.
	b.progress("closing the client")
	n0 = tr.n.Load()
	start = time.Now()
	c.Close()
	closed = true
	res.closeTime = time.Since(start)
	res.closeStmts = tr.n.Load() - n0
	if err := b.admin.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.schema}.Sanitize()+
		".leases WHERE namespace = 'held-leases' AND expires_at > clock_timestamp()").Scan(&res.leftHeld); err != nil {
		return nil, err
	}
	return res, nil
}

// millionResult compares fresh Once latency on an empty executions table
// with one holding opts.rows completed executions.
type millionResult struct {
	rows       int
	insertTime time.Duration
	size       string
	g          *group
}

// millionRows bulk-inserts opts.rows completed executions into a schema of
// their own and measures fresh Once there and in an empty schema,
// sequentially, interleaved.
func (b *bench) millionRows(ctx context.Context) (*millionResult, error) {
	res := &millionResult{rows: b.opts.rows}
	empty, full := b.schema+"_empty", b.schema+"_rows"
	b.extraSchemas = append(b.extraSchemas, empty, full)
	for _, s := range []string{empty, full} {
		c, err := sentinel.New(b.admin, &sentinel.Config{Schema: s})
		if err != nil {
			return nil, err
		}
		err = c.Migrate(ctx)
		c.Close()
		if err != nil {
			return nil, err
		}
	}
	q := pgx.Identifier{full}.Sanitize()
	b.progress("inserting %d completed executions (one INSERT ... SELECT generate_series)", b.opts.rows)
	start := time.Now()
	if _, err := b.admin.Exec(ctx, `INSERT INTO `+q+`.executions
		(namespace, key, state, owner, token, host, pid, created_at, updated_at, lease_expires_at, hard_expires_at, completed_at, result)
		SELECT 'default', md5(i::text), 'completed', 'bench-seed', nextval('`+q+`.fencing_token'), 'seed', 0,
			now(), now(), NULL, now(), now(), '{"id":"pay_1","amount":9900}'::bytea
		FROM generate_series(1, $1::int) AS i`, b.opts.rows); err != nil {
		return nil, fmt.Errorf("bulk insert: %w", err)
	}
	if _, err := b.admin.Exec(ctx, "VACUUM ANALYZE "+q+".executions"); err != nil {
		return nil, err
	}
	res.insertTime = time.Since(start)
	var size int64
	if err := b.admin.QueryRow(ctx, "SELECT pg_total_relation_size($1::regclass)", q+".executions").Scan(&size); err != nil {
		return nil, err
	}
	res.size = fmtBytes(float64(size))

	setup := func(schema, name string) setupFunc {
		return func(ctx context.Context, _ string, workers int) (*impl, error) {
			tr := &tracer{}
			c, closeFn, err := b.newClient(ctx, schema, tr, sentinel.Config{})
			if err != nil {
				return nil, err
			}
			keys := newKeyGen(workers)
			return &impl{name: name, stmts: tr.n.Load, tr: tr, close: closeFn,
				op: func(ctx context.Context, w int) error { return onceFresh(ctx, c, keys.next(w)) }}, nil
		}
	}
	g, err := b.runGroup(ctx, opOnceFresh, 1, []setupFunc{
		setup(empty, "sentinel.Once, empty executions table"),
		setup(full, fmt.Sprintf("sentinel.Once, %d completed executions", b.opts.rows)),
	})
	if err != nil {
		return nil, err
	}
	res.g = g
	return res, nil
}
