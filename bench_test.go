package sentinel_test

// Benchmarks. They run only with -bench, for example:
//
//	go test -run '^$' -bench . -benchtime 2s
//
// Every benchmark works in a schema of its own (newEnv) on the package's test
// database ($SENTINEL_TEST_DATABASE_URL, else a throwaway cluster; never
// $DATABASE_URL). Besides ns/op they report stmts/op: the statements the client
// sent per operation, counted by a pgx tracer. The comparison against the
// hand-written floor and against other lock implementations is the command in
// ./bench (see docs/benchmarks.md).
//
// Identifiers here start with "bench" to stay clear of the other test files
// of the package.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

type benchReceipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func benchCharge(context.Context) (benchReceipt, error) {
	return benchReceipt{ID: "pay_1", Amount: 9900}, nil
}

// benchCtx is a context for one benchmark, cancelled when it ends.
func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	return ctx
}

// reportStmts reports the statements counted by e.stmts since it was reset,
// per operation.
func reportStmts(b *testing.B, e *env, ops int) {
	if ops > 0 {
		b.ReportMetric(float64(e.stmts.n.Load())/float64(ops), "stmts/op")
	}
}

// A fresh key: claim, run fn, complete (two statements).
func BenchmarkOnceFresh(b *testing.B) {
	e := newEnv(b)
	c := e.client(nil)
	ctx := benchCtx(b)
	prefix := uuid.NewString()[:8] + "-"
	ops := 0
	e.stmts.n.Store(0)
	for b.Loop() {
		ops++
		res, err := sentinel.Once(ctx, c, prefix+strconv.Itoa(ops), benchCharge)
		if err != nil || res.Cached {
			b.Fatalf("Once: cached=%v err=%v", res.Cached, err)
		}
	}
	reportStmts(b, e, ops)
}

// A completed key: one primary-key read, result decoded.
func BenchmarkOnceReplay(b *testing.B) {
	e := newEnv(b)
	c := e.client(nil)
	ctx := benchCtx(b)
	if _, err := sentinel.Once(ctx, c, "replayed", benchCharge); err != nil {
		b.Fatal(err)
	}
	ops := 0
	e.stmts.n.Store(0)
	for b.Loop() {
		ops++
		res, err := sentinel.Once(ctx, c, "replayed", benchCharge)
		if err != nil || !res.Cached || res.Value.Amount != 9900 {
			b.Fatalf("replay: %+v, %v", res, err)
		}
	}
	reportStmts(b, e, ops)
}

// Acquire and release one uncontended lease (two statements).
func BenchmarkLeaseAcquireRelease(b *testing.B) {
	e := newEnv(b)
	c := e.client(nil)
	ctx := benchCtx(b)
	ops := 0
	e.stmts.n.Store(0)
	for b.Loop() {
		ops++
		l, err := c.Lease(ctx, "invoice-123")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	reportStmts(b, e, ops)
}

// benchRenewals is a pgx tracer that reports every batched renewal statement
// (recognised by its unnest of the lease arrays): its duration and how many
// leases it carried.
type benchRenewals struct {
	ch chan benchTick
}

type benchTick struct {
	leases int
	dur    time.Duration
	err    error
}

type benchTickStart struct {
	at     time.Time
	leases int
}

type benchTickKey struct{}

func (r *benchRenewals) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if !strings.Contains(d.SQL, "unnest(") || len(d.Args) < 2 {
		return ctx
	}
	n := -1
	if keys, ok := d.Args[1].([]string); ok {
		n = len(keys)
	}
	return context.WithValue(ctx, benchTickKey{}, benchTickStart{at: time.Now(), leases: n})
}

func (r *benchRenewals) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	s, ok := ctx.Value(benchTickKey{}).(benchTickStart)
	if !ok {
		return
	}
	select {
	case r.ch <- benchTick{leases: s.leases, dur: time.Since(s.at), err: d.Err}:
	default: // the benchmark is not listening (set-up); drop it
	}
}

// One heartbeat tick of a client holding N leases. There is no exported way
// to trigger the client's batched renewal, so the benchmark holds N leases
// with a 1s TTL (renewed every 333ms) and waits for the background ticks:
// ns/op is overridden with the mean duration of one renewal statement (the
// tick's cost; the wall time between ticks is the renewal interval), and
// leases/stmt is the batch size, N when all N leases are renewed by one
// statement.
func BenchmarkHeartbeatTick(b *testing.B) {
	for _, n := range []int{1, 100, 10_000} {
		b.Run("leases="+strconv.Itoa(n), func(b *testing.B) { benchHeartbeatTick(b, n) })
	}
}

func benchHeartbeatTick(b *testing.B, n int) {
	e := newEnv(b)
	ctx := benchCtx(b)
	tr := &benchRenewals{ch: make(chan benchTick, 64)}
	p := e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr })
	const ttl = time.Second
	c := e.clientOn(p, &sentinel.Config{DefaultTTL: ttl})
	held := make([]*sentinel.Lease, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				l, err := c.Lease(ctx, "hb-"+strconv.Itoa(i))
				if err != nil {
					errs <- err
					return
				}
				held[i] = l
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	// Wait until a tick renews every lease in one statement.
	deadline := time.After(10 * ttl)
	for converged := false; !converged; {
		select {
		case t := <-tr.ch:
			converged = t.err == nil && t.leases == n
		case <-deadline:
			b.Fatalf("no renewal statement carried all %d leases within %s", n, 10*ttl)
		}
	}
	var total time.Duration
	var leases, ticks int
	for b.Loop() {
		select {
		case t := <-tr.ch:
			if t.err != nil {
				b.Fatalf("renewal failed: %v", t.err)
			}
			total += t.dur
			leases += t.leases
			ticks++
		case <-time.After(5 * ttl):
			b.Fatal("no renewal within 5 TTLs")
		}
	}
	for _, l := range held {
		if err := l.Err(); err != nil {
			b.Fatalf("lease lost during the benchmark: %v", err)
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(ticks), "ns/op")
	b.ReportMetric(float64(leases)/float64(ticks), "leases/stmt")
}

// benchAcquireProbe counts completed acquire statements of one pool, so a
// benchmark can tell that a waiter's first attempt is over (it is then
// subscribed and waiting).
type benchAcquireProbe struct {
	mu   sync.Mutex
	n    int
	wake chan struct{} // closed and replaced on every count
}

type benchAcquireKey struct{}

func newBenchAcquireProbe() *benchAcquireProbe {
	return &benchAcquireProbe{wake: make(chan struct{})}
}

func (p *benchAcquireProbe) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "INSERT INTO") && strings.Contains(d.SQL, ".leases") || strings.Contains(d.SQL, ".lease_acquire_wait(") {
		return context.WithValue(ctx, benchAcquireKey{}, true)
	}
	return ctx
}

func (p *benchAcquireProbe) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(benchAcquireKey{}) == nil {
		return
	}
	p.mu.Lock()
	p.n++
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

func (p *benchAcquireProbe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// waitPast blocks until more than n acquire statements completed.
func (p *benchAcquireProbe) waitPast(n int, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		p.mu.Lock()
		done, wake := p.n > n, p.wake
		p.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-wake:
		case <-t.C:
			return fmt.Errorf("no acquire attempt completed within %s", timeout)
		}
	}
}

// Handover: a holder releases while another client waits (WithWait) for the
// same key. ns/op is overridden with the mean handover latency, from the
// start of Release to the waiter's Lease returning; p50-ns and p99-ns are
// its percentiles. The waiter's first, failed attempt happens before the
// clock starts. The two clients swap roles every iteration.
func BenchmarkHandover(b *testing.B) {
	e := newEnv(b)
	ctx := benchCtx(b)
	var clients [2]*sentinel.Client
	var probes [2]*benchAcquireProbe
	for i := range clients {
		probes[i] = newBenchAcquireProbe()
		p := e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = probes[i] })
		clients[i] = e.clientOn(p, nil)
	}
	holder, err := clients[0].Lease(ctx, "handover")
	if err != nil {
		b.Fatal(err)
	}
	side := 0
	var lat []time.Duration
	type got struct {
		l   *sentinel.Lease
		err error
	}
	for b.Loop() {
		w := 1 - side
		before := probes[w].count()
		ch := make(chan got, 1)
		go func() {
			l, err := clients[w].Lease(ctx, "handover", sentinel.WithWait())
			ch <- got{l, err}
		}()
		if err := probes[w].waitPast(before, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := holder.Release(ctx); err != nil {
			b.Fatal(err)
		}
		g := <-ch
		if g.err != nil {
			b.Fatal(g.err)
		}
		lat = append(lat, time.Since(start))
		holder, side = g.l, w
	}
	if err := holder.Release(ctx); err != nil {
		b.Fatal(err)
	}
	reportLatencies(b, lat)
}

func reportLatencies(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(lat)), "ns/op")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
}

// 64 goroutines of one client contend on one key.
//
//   - wait: each acquires with WithWait, then releases at once; ns/op is the
//     wall time per grant (the key's throughput under contention).
//   - try: each attempts without waiting and releases what it got; ns/op is
//     per attempt, grants/op the share of attempts that won.
func BenchmarkContended64(b *testing.B) {
	const goroutines = 64
	for _, mode := range []string{"wait", "try"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b)
			c := e.client(nil)
			ctx := benchCtx(b)
			var next, grants atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			e.stmts.n.Store(0)
			b.ResetTimer()
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						var l *sentinel.Lease
						var err error
						if mode == "wait" {
							l, err = c.Lease(ctx, "hot", sentinel.WithWait())
						} else {
							l, err = c.Lease(ctx, "hot")
						}
						if errors.Is(err, sentinel.ErrNotAcquired) && mode == "try" {
							continue
						}
						if err == nil {
							grants.Add(1)
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
			b.StopTimer()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			reportStmts(b, e, b.N)
			b.ReportMetric(float64(grants.Load())/float64(b.N), "grants/op")
		})
	}
}
