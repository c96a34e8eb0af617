package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// acquireProbe counts, per key, the completed acquire statements of one
// Sentinel client (seen through its pool's tracer). A waiter whose first
// attempt completed is subscribed to release notifications and waiting.
type acquireProbe struct {
	mu     sync.Mutex
	counts map[string]int
	wake   chan struct{} // closed and replaced on every count
}

type probeKey string

func newAcquireProbe() *acquireProbe {
	return &acquireProbe{counts: map[string]int{}, wake: make(chan struct{})}
}

func (p *acquireProbe) onStart(sql string, args []any) any {
	if (strings.Contains(sql, "INSERT INTO") && strings.Contains(sql, ".leases") || strings.Contains(sql, ".lease_acquire_wait(")) && len(args) > 1 {
		if k, ok := args[1].(string); ok {
			return probeKey(k)
		}
	}
	return nil
}

func (p *acquireProbe) onEnd(v any, _ error) {
	p.mu.Lock()
	p.counts[string(v.(probeKey))]++
	close(p.wake)
	p.wake = make(chan struct{})
	p.mu.Unlock()
}

func (p *acquireProbe) count(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[key]
}

// waitPast blocks until more than n acquire statements for key were seen.
func (p *acquireProbe) waitPast(ctx context.Context, key string, n int) error {
	err := waitUntil(ctx, 10*time.Second, func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.counts[key] > n, p.wake
	})
	if err != nil {
		return fmt.Errorf("no acquire statement for %q seen (probe no longer matches the library's SQL?): %w", key, err)
	}
	return nil
}

type sentinelPair struct {
	key     string
	clients [2]*sentinel.Client
	probes  [2]*acquireProbe
	held    [2]*sentinel.Lease
}

func (p *sentinelPair) acquire(ctx context.Context, side int) error {
	l, err := p.clients[side].Lease(ctx, p.key, sentinel.WithWait())
	p.held[side] = l
	return err
}

func (p *sentinelPair) release(ctx context.Context, side int) error {
	l := p.held[side]
	p.held[side] = nil
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

func (p *sentinelPair) prepareWait(side int) func(context.Context) error {
	n := p.probes[side].count(p.key)
	return func(ctx context.Context) error { return p.probes[side].waitPast(ctx, p.key, n) }
}

// sentinelHandover: two clients (two pools, two owners, each with its
// listener), as two processes would be; pair i contends on key i.
func (b *bench) sentinelHandover(ctx context.Context) (*handoverImpl, error) {
	var clients [2]*sentinel.Client
	var probes [2]*acquireProbe
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for i := range clients {
		probes[i] = newAcquireProbe()
		tr := &tracer{onStart: probes[i].onStart, onEnd: probes[i].onEnd}
		c, closeFn, err := b.newClient(ctx, b.schema, tr, sentinel.Config{})
		if err != nil {
			closeAll()
			return nil, err
		}
		clients[i] = c
		closers = append(closers, closeFn)
	}
	prefix := newKeyGen(1).prefix
	return &handoverImpl{
		name:   "sentinel Release → Lease(WithWait) (LISTEN/NOTIFY)",
		warmup: 3,
		newPair: func(_ context.Context, i int) (pair, error) {
			return &sentinelPair{key: fmt.Sprintf("%shandover-%d", prefix, i), clients: clients, probes: probes}, nil
		},
		close: closeAll,
	}, nil
}

type advisoryPair struct {
	b     *bench
	id    int64
	conns [2]*pgx.Conn
	pids  [2]uint32
}

func (p *advisoryPair) acquire(ctx context.Context, side int) error {
	_, err := p.conns[side].Exec(ctx, "SELECT pg_advisory_lock($1)", p.id)
	return err
}

func (p *advisoryPair) release(ctx context.Context, side int) error {
	var ok bool
	if err := p.conns[side].QueryRow(ctx, "SELECT pg_advisory_unlock($1)", p.id).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("advisory unlock: ok=%v err=%v", ok, err)
	}
	return nil
}

// prepareWait polls pg_locks until the waiter's backend waits for the lock.
func (p *advisoryPair) prepareWait(side int) func(context.Context) error {
	pid := p.pids[side]
	return func(ctx context.Context) error {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			var waiting bool
			if err := p.b.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
				WHERE pid = $1 AND locktype = 'advisory' AND NOT granted)`, int64(pid)).Scan(&waiting); err != nil {
				return err
			}
			if waiting {
				return nil
			}
			time.Sleep(200 * time.Microsecond)
		}
		return fmt.Errorf("backend %d never waited for the advisory lock", pid)
	}
}

// advisoryHandover: each pair holds two dedicated connections; the waiter
// blocks inside pg_advisory_lock and the server wakes it on unlock.
func (b *bench) advisoryHandover(context.Context) (*handoverImpl, error) {
	var mu sync.Mutex
	var conns []*pgx.Conn
	base := rand.Int64N(1 << 40)
	return &handoverImpl{
		name:   "pg_advisory_unlock → blocked pg_advisory_lock",
		warmup: 3,
		newPair: func(ctx context.Context, i int) (pair, error) {
			p := &advisoryPair{b: b, id: advisoryKey(base, i)}
			for s := range p.conns {
				c, err := newConn(ctx, b.url, nil)
				if err != nil {
					return nil, err
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				p.conns[s], p.pids[s] = c, c.PgConn().PID()
			}
			return p, nil
		},
		close: func() {
			for _, c := range conns {
				_ = c.Close(context.Background())
			}
		},
	}, nil
}

type pglockPair struct {
	key     string
	clients [2]*pglock.Client
	held    [2]*pglock.Lock
	lease   time.Duration
}

func (p *pglockPair) acquire(ctx context.Context, side int) error {
	l, err := p.clients[side].AcquireContext(ctx, p.key)
	p.held[side] = l
	return err
}

func (p *pglockPair) release(ctx context.Context, side int) error {
	l := p.held[side]
	p.held[side] = nil
	if l == nil {
		return nil
	}
	return p.clients[side].ReleaseContext(ctx, l)
}

// prepareWait: pglock's waiter cannot be observed from outside, and it
// polls once per lease duration, so the release is placed at a random
// phase of its polling: 20ms (its first attempt) plus uniform [0, lease).
func (p *pglockPair) prepareWait(int) func(context.Context) error {
	d := 20*time.Millisecond + rand.N(p.lease)
	return func(ctx context.Context) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pglockHandover: two pglock clients (two owners) on one database/sql pool.
func (b *bench) pglockHandover(context.Context) (*handoverImpl, error) {
	db, err := b.openPglockDB()
	if err != nil {
		return nil, err
	}
	var clients [2]*pglock.Client
	for i := range clients {
		if clients[i], err = b.newPglock(db); err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := clients[0].TryCreateTable(); err != nil {
		db.Close()
		return nil, err
	}
	prefix := newKeyGen(1).prefix
	return &handoverImpl{
		name: fmt.Sprintf("cirello.io/pglock Release → Acquire (polls every %s)", b.opts.pglockLease),
		newPair: func(_ context.Context, i int) (pair, error) {
			return &pglockPair{key: fmt.Sprintf("%shandover-%d", prefix, i), clients: clients, lease: b.opts.pglockLease}, nil
		},
		close: func() { db.Close() },
		note:  "release placed at a random phase of the waiter's polling",
	}, nil
}

// crowdProcesses is how many more processes wait in the schema during the
// crowded handover row.
const crowdProcesses = 16

// sentinelCrowdHandover is sentinelHandover with crowdProcesses more
// clients, each on a pool of its own as a process of its own would be
// (hence with a LISTEN connection of its own), each waiting
// (Lease(WithWait)) for a key another client holds for the whole row: in
// a deployment, every process that waits for something in the schema
// listens on it. A wake-up sent on the schema's channel reaches every one
// of them, which forwards it to its client; one sent on the waiter's
// process's own channel (migration 14) is forwarded by one. PostgreSQL
// still signals every listening backend of the database, whatever its
// channels.
func (b *bench) sentinelCrowdHandover(ctx context.Context) (*handoverImpl, error) {
	h, err := b.sentinelHandover(ctx)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var clientClosers []func()
	closePairs := h.close
	closeAll := func() {
		cancel()
		wg.Wait()
		for _, c := range clientClosers {
			c()
		}
		closePairs()
	}
	holder, closeHolder, err := b.newClient(ctx, b.schema, &tracer{}, sentinel.Config{})
	if err != nil {
		closeAll()
		return nil, err
	}
	clientClosers = append(clientClosers, closeHolder)
	prefix := newKeyGen(1).prefix + "crowd-"
	for i := range crowdProcesses {
		key := fmt.Sprintf("%s%d", prefix, i)
		if _, err := holder.Lease(ctx, key, sentinel.WithTTL(time.Hour)); err != nil {
			closeAll()
			return nil, err
		}
		c, closeC, err := b.newClient(ctx, b.schema, &tracer{}, sentinel.Config{})
		if err != nil {
			closeAll()
			return nil, err
		}
		clientClosers = append([]func(){closeC}, clientClosers...) // closed before the holder
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.Lease(wctx, key, sentinel.WithWait()); err == nil {
				_ = l.Release(context.Background())
			}
		}()
	}
	// Every one registered (and so listening) before the row starts.
	registered := func() bool {
		var n int
		err := b.admin.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+pgx.Identifier{b.schema}.Sanitize()+
			".lease_waiters WHERE key LIKE $1", prefix+"%").Scan(&n)
		return err == nil && n == crowdProcesses
	}
	for deadline := time.Now().Add(10 * time.Second); !registered(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			closeAll()
			return nil, fmt.Errorf("the crowd's %d waiters never all registered", crowdProcesses)
		}
	}
	h.name = fmt.Sprintf("%s, %d more processes waiting in the schema", h.name, crowdProcesses)
	h.close = closeAll
	return h, nil
}

// sentinelIdleCrowdHandover is sentinelHandover with crowdProcesses more
// clients, each on a pool of its own, each of which waited once
// (Lease(WithWait) on a free key, granted at once, released) and then
// idles for the whole row: a process that waited once keeps its LISTEN
// connection for Config.ListenIdleTimeout. With idle negative it keeps it
// throughout (as every version before that option did), and PostgreSQL
// signals each of those backends on every NOTIFY of the row; otherwise the
// row starts once the crowd's LISTEN connections closed. The row's name
// says how many of them listen (the crowd's connections carry an
// application_name of their own).
func (b *bench) sentinelIdleCrowdHandover(idle time.Duration) func(context.Context) (*handoverImpl, error) {
	return func(ctx context.Context) (*handoverImpl, error) {
		h, err := b.sentinelHandover(ctx)
		if err != nil {
			return nil, err
		}
		var closers []func()
		closePairs := h.close
		closeAll := func() {
			for _, c := range closers {
				c()
			}
			closePairs()
		}
		app := fmt.Sprintf("sentinel-bench-idle-%d", time.Now().UnixNano())
		listening := func() (int, error) {
			var n int
			err := b.admin.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'",
				app).Scan(&n)
			return n, err
		}
		prefix := newKeyGen(1).prefix + "idle-"
		for i := range crowdProcesses {
			pcfg, err := pgxpool.ParseConfig(b.url)
			if err != nil {
				closeAll()
				return nil, err
			}
			pcfg.MaxConns = int32(b.maxConns)
			pcfg.ConnConfig.RuntimeParams["application_name"] = app
			pool, err := pgxpool.NewWithConfig(ctx, pcfg)
			if err != nil {
				closeAll()
				return nil, err
			}
			c, err := sentinel.New(pool, &sentinel.Config{Schema: b.schema, ListenIdleTimeout: idle})
			if err != nil {
				pool.Close()
				closeAll()
				return nil, err
			}
			closers = append(closers, func() { c.Close(); pool.Close() })
			l, err := c.Lease(ctx, fmt.Sprintf("%s%d", prefix, i), sentinel.WithWait())
			if err != nil {
				closeAll()
				return nil, err
			}
			if err := l.Release(ctx); err != nil {
				closeAll()
				return nil, err
			}
		}
		crowd := 0
		for deadline := time.Now().Add(idle + 10*time.Second); ; time.Sleep(50 * time.Millisecond) {
			if crowd, err = listening(); err != nil {
				closeAll()
				return nil, err
			}
			if idle < 0 || crowd == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		state := fmt.Sprintf("closed after ListenIdleTimeout %v", idle)
		if idle < 0 {
			state = "ListenIdleTimeout negative, as before it existed"
		}
		h.name = fmt.Sprintf("%s, %d idle processes that waited once (%s; %d listen)", h.name, crowdProcesses, state, crowd)
		h.close = closeAll
		return h, nil
	}
}
