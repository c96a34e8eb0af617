package sentinel_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// holeDialer dials TCP as pgx does, but with keepalives off, and can turn
// one connection into a blackhole: what the client writes is dropped,
// what the server sends is discarded, and nothing is closed, as on a path
// that drops packets without a word (a partition, a NAT that forgot an
// idle flow). Nothing below the library notices such a connection.
type holeDialer struct {
	mu    sync.Mutex
	conns map[int]*holeConn // by local port
}

type holeConn struct {
	net.Conn
	hole atomic.Bool
}

func (c *holeConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.hole.Load() {
			return n, err
		}
		// Blackholed: the bytes never arrived. Deadlines still apply.
	}
}

func (c *holeConn) Write(b []byte) (int, error) {
	if c.hole.Load() {
		return len(b), nil // sent into the void
	}
	return c.Conn.Write(b)
}

func (d *holeDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{KeepAlive: -1}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hc := &holeConn{Conn: c}
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		d.mu.Lock()
		if d.conns == nil {
			d.conns = map[int]*holeConn{}
		}
		d.conns[a.Port] = hc
		d.mu.Unlock()
	}
	return hc, nil
}

func (d *holeDialer) ports() []int32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int32
	for p := range d.conns {
		out = append(out, int32(p))
	}
	return out
}

func (d *holeDialer) blackhole(port int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.conns[port].hole.Store(true)
}

// listenPort returns the client port of the LISTEN session among d's
// connections, or 0.
func listenPort(ctx context.Context, d *holeDialer) int {
	var port int
	err := admin.QueryRow(ctx, `SELECT client_port FROM pg_catalog.pg_stat_activity
		WHERE query LIKE 'LISTEN %' AND client_port = ANY($1) ORDER BY backend_start DESC LIMIT 1`, d.ports()).Scan(&port)
	if err != nil {
		return 0
	}
	return port
}

// A waiter whose client's LISTEN connection goes silent (blackholed: no
// error, no notification) is not left to sleep until the holder's expiry:
// the listener pings its quiet connection with a deadline, replaces it,
// and the waiter re-checks. Here the holder's lease has a TTL of 10
// minutes and is released while the waiter's listener is blackholed: the
// release notification is lost, yet the waiter gets the lease. Before the
// listener checked its connection, the waiter slept until the holder's
// expiry (keepalives off: TCP would never have noticed either).
func TestListenerBlackholeIsReplaced(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	d := &holeDialer{}
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial })
	if h := pool.Config().ConnConfig.Host; h == "" || h[0] == '/' {
		t.Skipf("needs a TCP connection to the test database, have host %q", h)
	}
	waiter := e.clientOn(pool, &sentinel.Config{Owner: "waiter", WaitRecheck: time.Second})
	holder := e.client(&sentinel.Config{Owner: "holder"})

	const key = "blackholed-listener"
	held, err := holder.Lease(ctx, key, sentinel.WithTTL(10*time.Minute))
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	got := make(chan error, 1)
	var acquired atomic.Pointer[sentinel.Lease]
	go func() {
		l, err := waiter.Lease(wctx, key, sentinel.WithTTL(10*time.Second), sentinel.WithWait())
		acquired.Store(l)
		got <- err
	}()

	// The waiter sleeps on its listener: counted in, so the release will
	// notify it, and nothing else wakes it for 10 minutes.
	var port int
	for port == 0 || e.count("leases", "key = $1 AND waiters > 0", key) == 0 {
		require.NoError(t, ctx.Err(), "the waiter never started listening")
		time.Sleep(20 * time.Millisecond)
		port = listenPort(ctx, d)
	}
	d.blackhole(port)
	require.NoError(t, held.Release(ctx))

	select {
	case err := <-got:
		require.NoError(t, err)
		l := acquired.Load()
		require.NotNil(t, l)
		require.Greater(t, l.Token(), held.Token())
		require.NoError(t, l.Release(ctx))
	case <-wctx.Done():
		t.Fatalf("the waiter was still waiting %s after the release: its blackholed LISTEN connection was never replaced", 90*time.Second)
	}
	// The listener listens again, on a new connection.
	for np := listenPort(ctx, d); np == 0 || np == port; np = listenPort(ctx, d) {
		require.NoError(t, ctx.Err(), "no new LISTEN session")
		time.Sleep(20 * time.Millisecond)
	}
}

// A healthy listener that has nothing to report for a while is pinged,
// not replaced: its LISTEN session stays the same backend through several
// pings, and a release after the quiet spell still wakes the waiter (the
// holder's TTL is 10 minutes, so nothing else would).
func TestListenerQuietConnectionIsKept(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	app := "quiet-" + e.schema
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["application_name"] = app })
	waiter := e.clientOn(pool, &sentinel.Config{Owner: "waiter"})
	holder := e.client(&sentinel.Config{Owner: "holder"})
	const key = "quiet-listener"
	held, err := holder.Lease(ctx, key, sentinel.WithTTL(10*time.Minute))
	require.NoError(t, err)
	got := make(chan error, 1)
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	go func() {
		l, err := waiter.Lease(wctx, key, sentinel.WithTTL(10*time.Second), sentinel.WithWait())
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	backend := func() (pid int) {
		_ = admin.QueryRow(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&pid)
		return pid
	}
	var pid int
	for pid == 0 || e.count("leases", "key = $1 AND waiters > 0", key) == 0 {
		require.NoError(t, ctx.Err(), "the waiter never started listening")
		time.Sleep(20 * time.Millisecond)
		pid = backend()
	}
	// Several idle periods: the listener pings (a LISTEN statement again,
	// so the session's query_start moves) and keeps its connection.
	var start0 time.Time
	require.NoError(t, admin.QueryRow(ctx, `SELECT query_start FROM pg_catalog.pg_stat_activity WHERE pid = $1`, pid).Scan(&start0))
	for {
		var qs time.Time
		require.NoError(t, admin.QueryRow(ctx, `SELECT query_start FROM pg_catalog.pg_stat_activity WHERE pid = $1`, pid).Scan(&qs),
			"the listener's backend %d went away: a quiet connection was replaced", pid)
		if qs.Sub(start0) >= 3*time.Second { // at least two pings later
			break
		}
		require.NoError(t, ctx.Err())
		time.Sleep(100 * time.Millisecond)
	}
	require.Equal(t, pid, backend(), "the quiet LISTEN connection was replaced")
	require.NoError(t, held.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-wctx.Done():
		t.Fatal("the waiter missed the release after a quiet spell")
	}
}

// blackholeAll turns every connection d has dialed so far into a
// blackhole; connections dialed later pass.
func (d *holeDialer) blackholeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.hole.Store(true)
	}
}

// closeHoles closes the blackholed connections, as TCP does when it gives
// up on them at last: pgx waits up to 15 s for a reply to its goodbye on
// each otherwise.
func (d *holeDialer) closeHoles() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		if c.hole.Load() {
			_ = c.Conn.Close()
		}
	}
}

// A waiter (Lease with WithWait, Turn) on a pool with no TCP timeouts
// (pgx's defaults), all of whose connections lose their path at once
// while it waits, is served over new connections once the key is
// released, instead of staying in a statement on a dead connection until
// its caller's deadline (or TCP's, 15 minutes on Linux): each of its
// statements is bounded by the TTL of what it keeps. Before the bound the
// waiter's next statement (its registration's renewal, a serving check)
// sat on a blackholed connection and the waits below ended only at their
// 60 s deadline (the fault suite's TestBlackholeVanishedServer, once in
// four runs).
func TestWaiterStatementOnABlackholedConnection(t *testing.T) {
	for _, kind := range []string{"lease", "turn"} {
		t.Run(kind, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			d := &holeDialer{}
			pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial; c.MaxConns = 2 })
			t.Cleanup(d.closeHoles) // before the pool closes
			if h := pool.Config().ConnConfig.Host; h == "" || h[0] == '/' {
				t.Skipf("needs a TCP connection to the test database, have host %q", h)
			}
			waiter := e.clientOn(pool, &sentinel.Config{Owner: "waiter", WaitRecheck: 200 * time.Millisecond})
			holder := e.client(&sentinel.Config{Owner: "holder"})
			const key = "blackholed-waiter"
			const ttl = 2 * time.Second

			var release func(context.Context) error
			waiting := func() bool { return e.count("leases", "key = $1 AND waiters > 0", key) > 0 }
			if kind == "lease" {
				held, err := holder.Lease(ctx, key, sentinel.WithTTL(10*time.Minute))
				require.NoError(t, err)
				release = held.Release
			} else {
				turn, err := holder.Turn(ctx, key, sentinel.WithTTL(10*time.Minute))
				require.NoError(t, err)
				release = turn.Release
				waiting = func() bool { return e.count("tickets", "resource = $1", key) > 1 }
			}

			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			got := make(chan error, 1)
			go func() {
				if kind == "lease" {
					l, err := waiter.Lease(wctx, key, sentinel.WithTTL(ttl), sentinel.WithWait())
					if err == nil {
						err = l.Release(ctx)
					}
					got <- err
					return
				}
				turn, err := waiter.Turn(wctx, key, sentinel.WithTTL(ttl))
				if err == nil {
					err = turn.Release(ctx)
				}
				got <- err
			}()
			for !waiting() || listenPort(ctx, d) == 0 {
				require.NoError(t, ctx.Err(), "the waiter never waited")
				time.Sleep(20 * time.Millisecond)
			}
			d.blackholeAll()
			// Let the waiter's next statement (a renewal, after a third of
			// its TTL) go into a blackholed connection before the release.
			time.Sleep(ttl / 2)
			released := time.Now()
			require.NoError(t, release(ctx))
			select {
			case err := <-got:
				require.NoError(t, err)
				t.Logf("served %s after the release", time.Since(released).Round(time.Millisecond))
			case <-wctx.Done():
				t.Fatalf("the waiter was still waiting %s after the release: a statement on a blackholed connection", time.Since(released).Round(time.Second))
			}
		})
	}
}
