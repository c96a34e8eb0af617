package sentinel_test

// Regression tests for the adversarial review of the core (issue 8). Each
// test names the item it closes and failed before its fix.

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Item 1: a handle renewed elsewhere with a short TTL must not shorten the
// lease its holder is trusting; TTL 0 or negative is bad input.
func TestRenewHandleNeverShortensALease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder, other, third := e.client(nil), e.client(nil), e.client(nil)
	l, err := holder.Lease(ctx, "k", sentinel.WithTTL(10*time.Second))
	require.NoError(t, err)
	defer l.Release(ctx)

	_, err = other.RenewHandle(ctx, l.Handle(), 300*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(400 * time.Millisecond)
	require.NoError(t, l.Err(), "the holder still trusts its lease")
	_, err = third.Lease(ctx, "k")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired, "a third client must not get a key whose holder trusts it")

	for _, ttl := range []time.Duration{0, -time.Second, time.Millisecond} {
		_, err = other.RenewHandle(ctx, l.Handle(), ttl)
		require.ErrorIs(t, err, sentinel.ErrInvalid, "ttl %s", ttl)
	}
}

// Item 2: Prune acts on the client's namespace unless told otherwise;
// an empty namespace and a retention below MinRetention are refused and
// delete nothing.
func TestPruneStaysInItsNamespace(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	payments := e.client(&sentinel.Config{Namespace: "payments"})
	bad := e.client(&sentinel.Config{Namespace: "bad"})
	_, err := sentinel.Once(ctx, payments, "charge-1", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, bad, "x", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	e.age(48 * time.Hour)

	for _, call := range []func() (sentinel.PruneResult, error){
		func() (sentinel.PruneResult, error) { return bad.Prune(ctx, 0) },
		func() (sentinel.PruneResult, error) { return bad.Prune(ctx, time.Minute) },
		func() (sentinel.PruneResult, error) { return bad.Prune(ctx, 2*time.Hour, sentinel.WithNamespace("")) },
		func() (sentinel.PruneResult, error) {
			return bad.Prune(ctx, 2*time.Hour, sentinel.WithNamespace("payments"), sentinel.WithAllNamespaces())
		},
	} {
		_, err := call()
		require.ErrorIs(t, err, sentinel.ErrInvalid)
		require.Equal(t, 2, e.count("executions", ""), "bad input deletes nothing")
	}
	res, err := bad.Prune(ctx, 2*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Executions)
	require.Equal(t, 1, e.count("executions", "namespace = 'payments'"), "another namespace's payment survives")
	again, err := sentinel.Once(ctx, payments, "charge-1", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.True(t, again.Cached, "the payment is not charged again")

	e.age(48 * time.Hour)
	res, err = bad.Prune(ctx, 2*time.Hour, sentinel.WithAllNamespaces())
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Executions)
	require.Zero(t, e.count("executions", ""))
}

// Item 3: every schema name New accepts works for every operation: quotes
// (a single quote went into a string literal), spaces, upper case, and a
// 63-byte non-ASCII name (the NOTIFY channel was cut inside a character).
func TestSchemaNamesThatNewAccepts(t *testing.T) {
	suffix := uuid.NewString()[:6]
	long := strings.Repeat("é", 28) + "_" + suffix // 56 + 7 = 63 bytes
	require.Len(t, long, 63)
	for _, schema := range []string{`O'Brien ` + suffix, `We"ird Sch.ema ` + suffix, `UPPER Case ` + suffix, `back\slash ` + suffix, long} {
		t.Run(schema, func(t *testing.T) {
			ctx := ctxT(t)
			t.Cleanup(func() {
				_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			})
			p, err := pgxpool.New(ctx, dbURL)
			require.NoError(t, err)
			defer p.Close()
			newClient := func() *sentinel.Client {
				c, err := sentinel.New(p, &sentinel.Config{Schema: schema})
				require.NoError(t, err)
				t.Cleanup(c.Close)
				return c
			}
			a, b := newClient(), newClient()
			require.NoError(t, a.Migrate(ctx))

			l, err := a.Lease(ctx, "k", sentinel.WithTTL(30*time.Second))
			require.NoError(t, err)
			require.NoError(t, l.Heartbeat(ctx))
			require.NoError(t, a.VerifyToken(ctx, p, "k", l.Token()))
			// A waiter is woken by the release's NOTIFY, long before the
			// 30 s expiry: the channel works for this schema.
			got := make(chan error, 1)
			go func() {
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				l2, err := b.Lease(wctx, "k", sentinel.WithWait())
				if err == nil {
					err = l2.Release(ctx)
				}
				got <- err
			}()
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, l.Release(ctx))
			require.NoError(t, <-got)

			res, err := sentinel.Once(ctx, a, "o", func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
			require.Equal(t, 1, res.Value)
			res, err = sentinel.Once(ctx, b, "o", func(context.Context) (int, error) { return 2, nil })
			require.NoError(t, err)
			require.True(t, res.Cached)
			_, err = a.History(ctx, "o")
			require.NoError(t, err)
			_, err = a.Prune(ctx, time.Hour)
			require.NoError(t, err)
		})
	}
}

// Item 4: a role that can create functions and set search_path must not be
// able to shadow the clock (or any built-in Sentinel calls).
func TestSearchPathCannotShadowBuiltins(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	evil := "evil_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	_, err := admin.Exec(ctx, "CREATE SCHEMA "+evil+`;
		CREATE FUNCTION `+evil+`.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$;
		CREATE FUNCTION `+evil+`.statement_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT '-infinity'::timestamptz $$;
		CREATE FUNCTION `+evil+`.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT 'infinity'::timestamptz $$;`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+evil+" CASCADE") })

	holder := e.client(nil)
	l, err := holder.Lease(ctx, "k", sentinel.WithTTL(30*time.Second))
	require.NoError(t, err)
	defer l.Release(ctx)

	shadowed := e.clientOn(e.pool(func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["search_path"] = evil + ", pg_catalog, public"
	}), nil)
	_, err = shadowed.Lease(ctx, "k")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired, "a shadowed clock made a held key look expired")
	_, err = sentinel.Once(ctx, shadowed, "o", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	ex, err := holder.Inspect(ctx, "o")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.False(t, ex.CompletedAt.IsZero())
	require.Less(t, time.Since(ex.CompletedAt).Abs(), time.Hour, "completed_at came from the real clock")
}

// Item 5: a waiter in a namespace with multi-byte characters is woken by
// the release (the payload carried the length in characters, the parser
// counted bytes).
func TestWaiterInNonASCIINamespaceIsWoken(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	ns := sentinel.WithNamespace("zahlungen-über-€")
	a, b := e.client(nil), e.client(nil)
	l, err := a.Lease(ctx, "rechnung-ä", ns, sentinel.WithTTL(30*time.Second))
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		l2, err := b.Lease(wctx, "rechnung-ä", ns, sentinel.WithWait())
		if err == nil {
			err = l2.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	require.NoError(t, l.Release(ctx))
	require.NoError(t, <-got)
	require.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by the 30 s expiry")
}

// Item 6: a renewal stuck on a black-holed connection must not starve the
// client's other leases: they are renewed on other connections in time.
func TestStuckRenewalDoesNotStarveOtherLeases(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	c := e.clientOn(e.pool(func(c *pgxpool.Config) {
		px.route(c)
		c.MaxConns = 6
	}), &sentinel.Config{DefaultTTL: 900 * time.Millisecond})

	long, err := c.Lease(ctx, "long", sentinel.WithTTL(time.Hour))
	require.NoError(t, err)
	px.arm("unnest") // black-hole the next connection that sends a renewal
	require.Eventually(t, px.frozen, 5*time.Second, 10*time.Millisecond, "the long lease's renewal never went out")

	short, err := c.Lease(ctx, "short")
	require.NoError(t, err)
	time.Sleep(3 * time.Second) // over 3x the short lease's TTL
	require.NoError(t, short.Err(), "the short lease starved behind a stuck renewal")
	require.NoError(t, long.Err())
	require.NoError(t, short.Release(ctx))
	require.NoError(t, long.Release(ctx))
}

// Item 10: Heartbeat must renew or say it did not; a row kept locked by
// another transaction was skipped and Heartbeat returned nil. (VerifyToken
// no longer blocks renewals, issue 17.2; a transaction that locks the row
// FOR SHARE itself still does.)
func TestHeartbeatReportsARowItCouldNotRenew(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	l, err := c.Lease(ctx, "k", sentinel.WithTTL(3*time.Second))
	require.NoError(t, err)
	defer l.Release(ctx)
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) // before Release, which would wait for the row
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("leases")+" WHERE key = 'k' FOR SHARE")
	require.NoError(t, err)
	// The row stays locked for the whole call: Heartbeat gives up after a
	// renewal interval (or when its ctx ends) and reports ErrBusy, not a
	// context error, even on a machine slow enough that the deadline
	// passes while a renew statement is in flight.
	for _, d := range []time.Duration{300 * time.Millisecond, 10 * time.Second} {
		hctx, cancel := context.WithTimeout(ctx, d)
		err = l.Heartbeat(hctx)
		cancel()
		if d < time.Second && errors.Is(err, context.DeadlineExceeded) {
			continue // so slow a machine that no renew statement finished in 300ms
		}
		require.ErrorIs(t, err, sentinel.ErrBusy, "ctx %v", d)
	}
	var busy *sentinel.BusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, l.Token(), busy.Token)
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, l.Heartbeat(ctx))
}

// freezeProxy forwards TCP connections to PostgreSQL; once armed, the first
// connection whose client bytes contain a marker is black-holed: nothing
// more is forwarded either way and the socket stays open.
type freezeProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu           sync.Mutex
	marker       string
	forwardFirst bool
	resetAfter   time.Duration // how long a frozen connection stays open; 0: 3s
	isFrozen     atomic.Bool
	conns        []net.Conn
}

func newFreezeProxy(t *testing.T, url string) *freezeProxy {
	cfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &freezeProxy{t: t, ln: ln, target: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skip("the test database is on a Unix socket; the proxy needs TCP")
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			var frozen atomic.Bool
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(c, s, &frozen, true) }()
			go func() { defer wg.Done(); p.pipe(s, c, &frozen, false) }()
		}
	}()
	return p
}

func (p *freezeProxy) pipe(from, to net.Conn, frozen *atomic.Bool, fromClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && fromClient {
			p.mu.Lock()
			if p.marker != "" && strings.Contains(string(buf[:n]), p.marker) {
				p.marker = ""
				// Frozen before the statement is forwarded: the server's
				// reply can come back before this goroutine runs again
				// (CI saw a reply slip through under load).
				frozen.Store(true)
				p.isFrozen.Store(true)
				if p.forwardFirst {
					_, _ = to.Write(buf[:n])
					n = 0
				}
				// Like a TCP keepalive giving up: reset the black-holed
				// connection a while later, so closing pools need not wait.
				after := p.resetAfter
				if after == 0 {
					after = 3 * time.Second
				}
				time.AfterFunc(after, func() { _ = from.Close(); _ = to.Close() })
			}
			p.mu.Unlock()
		}
		if frozen.Load() {
			// Black hole: swallow everything until the socket closes.
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_ = to.Close()
			}
			_ = to.Close()
			return
		}
	}
}

func (p *freezeProxy) arm(marker string) {
	p.mu.Lock()
	p.marker, p.forwardFirst, p.resetAfter = marker, false, 0
	p.mu.Unlock()
}

// armAfter is arm, but the matching chunk is still forwarded: the server
// acts on it and its reply is lost.
func (p *freezeProxy) armAfter(marker string) {
	p.mu.Lock()
	p.marker, p.forwardFirst, p.resetAfter = marker, true, 0
	p.mu.Unlock()
}

// armDrop is armAfter, but the connection is reset after d (long enough
// for the server to commit what it was sent) rather than black-holed for
// seconds: the client's statement fails with a dropped connection, the
// reply of a statement that committed lost.
func (p *freezeProxy) armDrop(marker string, d time.Duration) {
	p.mu.Lock()
	p.marker, p.forwardFirst, p.resetAfter = marker, true, d
	p.mu.Unlock()
}

func (p *freezeProxy) frozen() bool { return p.isFrozen.Load() }

func (p *freezeProxy) port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// route points a pool's connections at the proxy, in clear text: the
// proxy reads the statements, which a server offering TLS (Debian's
// PostgreSQL does by default) would otherwise have encrypted under
// pgx's default sslmode=prefer.
func (p *freezeProxy) route(c *pgxpool.Config) {
	c.ConnConfig.Host, c.ConnConfig.Port = "127.0.0.1", p.port()
	c.ConnConfig.Fallbacks = nil
	c.ConnConfig.TLSConfig = nil
}

// proxiedClient returns a client in e's schema whose connections go
// through p, in the simple protocol (the statement's text is in the
// message that runs it, for the proxy to match), traced by tr when it is
// not nil.
func (e *env) proxiedClient(p *freezeProxy, tr *hookTracer, cfg *sentinel.Config) *sentinel.Client {
	return e.clientOn(e.pool(func(c *pgxpool.Config) {
		p.route(c)
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		if tr != nil {
			c.ConnConfig.Tracer = tr
		}
	}), cfg)
}

// hookTracer runs a hook when a statement containing match ends, before
// its caller sees the result.
type hookTracer struct {
	match string
	hook  atomic.Pointer[func()]
}

func (h *hookTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, h.match) {
		return context.WithValue(ctx, h, true)
	}
	return ctx
}

func (h *hookTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(h) == nil {
		return
	}
	if f := h.hook.Swap(nil); f != nil {
		(*f)()
	}
}

// closeDuring arms tr so that Close starts while the traced statement's
// reply is on its way back.
func closeDuring(tr *hookTracer, c *sentinel.Client) {
	f := func() {
		go c.Close()
		time.Sleep(200 * time.Millisecond) // Close has begun: it is waiting for releases or done
	}
	tr.hook.Store(&f)
}

// Item 7: a grant that lands after Close began is given back at once and
// the call returns ErrClosed (it used to return a lease nobody renewed or
// released).
func TestGrantInFlightAcrossClose(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)

	tr := &hookTracer{match: "INSERT INTO"}
	c := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), nil)
	closeDuring(tr, c)
	l, err := c.Lease(ctx, "k", sentinel.WithTTL(time.Minute))
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.Nil(t, l)
	require.Zero(t, e.count("leases", "expires_at > pg_catalog.clock_timestamp()"), "the grant was given back")

	tr2 := &hookTracer{match: "once_claim_packed("} // the claim statement
	c2 := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr2 }), nil)
	closeDuring(tr2, c2)
	ran := false
	_, err = sentinel.Once(ctx, c2, "o", func(context.Context) (int, error) { ran = true; return 1, nil }, sentinel.WithTTL(time.Minute))
	require.ErrorIs(t, err, sentinel.ErrClosed)
	require.False(t, ran)
	ex, err := e.client(nil).Inspect(ctx, "o")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State)
	require.False(t, ex.LeaseAlive, "the claim was given back for the next caller")
	res, err := sentinel.Once(ctx, e.client(nil), "o", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.Equal(t, 2, res.Value)
}

// Item 11: concurrent Release calls, or Release and Close, all succeed.
func TestConcurrentReleaseAllSucceed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for i := range 40 {
		l, err := c.Lease(ctx, "k")
		require.NoError(t, err)
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- l.Release(ctx) }()
		}
		require.NoError(t, <-errs, "round %d", i)
		require.NoError(t, <-errs, "round %d", i)
	}
	for i := range 10 {
		cl := e.client(nil)
		l, err := cl.Lease(ctx, "k")
		require.NoError(t, err)
		errs := make(chan error, 1)
		go func() { errs <- l.Release(ctx) }()
		cl.Close()
		require.NoError(t, <-errs, "round %d", i)
		require.ErrorIs(t, l.Err(), sentinel.ErrReleased)
	}
}

// After Close every call says ErrClosed, reads included (issue 9, item 11).
func TestEveryCallAfterCloseIsErrClosed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	c.Close()
	calls := map[string]error{}
	_, calls["Lease"] = c.Lease(ctx, "k")
	_, calls["Once"] = sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
	_, calls["Inspect"] = c.Inspect(ctx, "k")
	_, calls["History"] = c.History(ctx, "k")
	_, calls["Holder"] = c.Holder(ctx, "k")
	_, calls["Reconcile"] = c.Reconcile(ctx, "k")
	calls["ForceComplete"] = c.ForceComplete(ctx, "k", 1)
	calls["ResetToClaimed"] = c.ResetToClaimed(ctx, "k")
	_, calls["Prune"] = c.Prune(ctx, time.Hour)
	calls["VerifyToken"] = c.VerifyToken(ctx, admin, "k", 1)
	calls["Migrate"] = c.Migrate(ctx)
	_, calls["RenewHandle"] = c.RenewHandle(ctx, sentinel.LeaseHandle{Namespace: "default", Key: "k", Owner: "o", Token: 1}, time.Second)
	calls["ReleaseHandle"] = c.ReleaseHandle(ctx, sentinel.LeaseHandle{Namespace: "default", Key: "k", Owner: "o", Token: 1})
	for name, err := range calls {
		require.ErrorIs(t, err, sentinel.ErrClosed, name)
	}
}

// Issue 9, item 8: Do acquires, runs fn under the lease, releases; a loss
// cancels fn's context and is reported.
func TestDoRunsUnderTheLease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, b := e.client(nil), e.client(nil)
	var inside atomic.Int32
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := a
			if i%2 == 1 {
				c = b
			}
			err := c.Do(ctx, "job", func(ctx context.Context, l *sentinel.Lease) error {
				if inside.Add(1) != 1 {
					t.Error("two holders inside Do")
				}
				time.Sleep(30 * time.Millisecond)
				inside.Add(-1)
				return c.VerifyToken(ctx, admin, "job", l.Token())
			}, sentinel.WithWait())
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	require.Zero(t, e.count("leases", "expires_at > pg_catalog.clock_timestamp()"), "every Do released")

	errWork := errors.New("work failed")
	err := a.Do(ctx, "job", func(context.Context, *sentinel.Lease) error { return errWork })
	require.ErrorIs(t, err, errWork)

	err = a.Do(ctx, "job", func(ctx context.Context, l *sentinel.Lease) error {
		_, err := b.Lease(context.Background(), "job", sentinel.WithForce())
		require.NoError(t, err)
		<-ctx.Done() // the takeover is seen at the next renewal
		return context.Cause(ctx)
	}, sentinel.WithTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrLeaseLost)

	require.ErrorIs(t, a.Do(ctx, "job", nil), sentinel.ErrInvalid)
}

// The listings read the database after Close, as no other call does:
// Leases, Elections, ExecutionCounts and MigrationStatus returned what
// they read (or the pool's own error once the pool was closed) instead of
// ErrClosed.
func TestListingsAfterCloseAreErrClosed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	c.Close()
	calls := map[string]error{}
	_, calls["Leases"] = c.Leases(ctx, sentinel.LeaseFilter{})
	_, calls["Elections"] = c.Elections(ctx, sentinel.ElectionFilter{})
	_, calls["ExecutionCounts"] = c.ExecutionCounts(ctx, "", false)
	_, calls["MigrationStatus"] = c.MigrationStatus(ctx)
	_, _, calls["Executions"] = c.Executions(ctx, sentinel.ExecutionFilter{})
	_, calls["UncertainCounts"] = c.UncertainCounts(ctx)
	_, calls["AttentionCounts"] = c.AttentionCounts(ctx)
	_, calls["Queues"] = c.Queues(ctx)
	_, calls["Leader"] = c.Leader(ctx, "g")
	_, calls["Members"] = c.Members(ctx, "g")
	_, calls["LastRun"] = c.LastRun(ctx, "k")
	for name, err := range calls {
		require.ErrorIs(t, err, sentinel.ErrClosed, name)
	}
}
