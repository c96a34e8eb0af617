package sentinel_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// outageDialer is a holeDialer that can cut the database off altogether,
// as a partition does: every connection dialed so far turns into a
// blackhole and a new dial hangs (its SYN dropped) until its context
// ends or the outage is lifted.
type outageDialer struct {
	holeDialer
	down chan struct{} // closed when the outage is lifted; nil: no outage
}

func (d *outageDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	down := d.down
	d.mu.Unlock()
	if down != nil {
		select {
		case <-ctx.Done():
			return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
		case <-down:
		}
	}
	return d.holeDialer.dial(ctx, network, addr)
}

// cutOff starts the outage; the test's cleanup lifts it and closes the
// blackholed connections, before the pool closes.
func (d *outageDialer) cutOff(t *testing.T) {
	d.mu.Lock()
	d.down = make(chan struct{})
	down := d.down
	d.mu.Unlock()
	d.blackholeAll()
	t.Cleanup(func() { close(down); d.closeHoles() })
}

// Close during an outage in which the database's packets are dropped
// (connections hang, nothing is refused) returns within one
// ReleaseTimeout, with a lease wait under way and a lease held. It took
// two and more: it waited up to ReleaseTimeout for the wait to withdraw
// (its statement hanging on a dead connection), only then started its
// ReleaseTimeout for the releases, and then waited for the listener's
// connection to close. An operator who sized a pod's termination grace
// period by ReleaseTimeout saw the pod killed mid-Close.
func TestCloseInABlackholeOutageTakesOneReleaseTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	d := &outageDialer{}
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial })
	if h := pool.Config().ConnConfig.Host; h == "" || h[0] == '/' {
		t.Skipf("needs a TCP connection to the test database, have host %q", h)
	}
	const timeout = 2 * time.Second
	var obs closeObserver
	c := e.clientOn(pool, &sentinel.Config{Owner: "closing", DefaultTTL: time.Minute, ReleaseTimeout: timeout, Observer: obs.observer()})
	other := e.client(&sentinel.Config{Owner: "other"})

	theirs, err := other.Lease(ctx, "theirs", sentinel.WithTTL(10*time.Minute))
	require.NoError(t, err)
	mine, err := c.Lease(ctx, "mine")
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		l, err := c.Lease(ctx, "theirs", sentinel.WithWait())
		if l != nil {
			_ = l.Release(ctx)
		}
		waited <- err
	}()
	for e.count("leases", "key = 'theirs' AND waiters > 0") == 0 || listenPort(ctx, &d.holeDialer) == 0 {
		require.NoError(t, ctx.Err(), "the waiter never waited")
		time.Sleep(20 * time.Millisecond)
	}

	d.cutOff(t)
	start := time.Now()
	c.Close()
	took := time.Since(start)
	t.Logf("Close took %s in the outage, ReleaseTimeout %s", took.Round(time.Millisecond), timeout)
	require.Less(t, took, timeout+timeout/2, "Close took %s in a blackhole outage, ReleaseTimeout %s", took, timeout)

	// What Close documents still holds: the wait ended with ErrClosed, the
	// lease it could not release reads as a failed release.
	select {
	case err := <-waited:
		require.ErrorIs(t, err, sentinel.ErrClosed)
	case <-time.After(2 * timeout):
		t.Fatal("the wait did not end after Close")
	}
	<-mine.Done()
	require.ErrorIs(t, mine.Err(), sentinel.ErrClosed)
	require.Equal(t, int32(1), obs.failed.Load(), "one failed release reported")
	require.NoError(t, theirs.Release(ctx))
}

// closeBeside cuts the database off and closes c, starting release (a
// Lease.Release or Turn.Release with context.Background(), as a deferred
// Release is) in Close once its heartbeater stopped and waiting until it
// is under way (underWay); it returns how long Close took. The Release
// hangs on its dead connection until the outage is lifted; the test's
// cleanup lifts it and waits for the Release to return. Close that does
// not return within a generous bound fails the test rather than hang it.
func closeBeside(t *testing.T, c *sentinel.Client, d *outageDialer, release func() error, underWay func() bool) time.Duration {
	t.Helper()
	released := make(chan error, 1)
	t.Cleanup(func() { // after the outage is lifted (cleanups run last first)
		select {
		case <-released:
		case <-time.After(time.Minute):
			t.Error("the Release did not return after the outage was lifted")
		}
	})
	d.cutOff(t)
	// The Release begins after Close stopped the heartbeater, so Close
	// still counts the lease or turn as held, and is under way when Close
	// ends them: a deferred Release racing Close.
	sentinel.SetCloseAfterStop(c, func() {
		go func() { released <- release() }()
		// Not waitFor: this is Close's goroutine, not the test's.
		for give := time.Now().Add(10 * time.Second); !underWay() && time.Now().Before(give); {
			time.Sleep(time.Millisecond)
		}
	})
	closed := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		c.Close()
		closed <- time.Since(start)
	}()
	select {
	case took := <-closed:
		return took
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s in a blackhole outage: it waits for the Release under way")
		return 0
	}
}

// A Release under way on another goroutine when Close is called in a
// blackhole outage (a deferred Release(context.Background()) racing the
// Close a SIGTERM triggers) does not hold Close past its one
// ReleaseTimeout: Close waited for that Release's lock without bound, so
// until TCP gave up on the dead connection, minutes. The lease is left to
// that Release: Close neither releases it again nor reports it.
func TestCloseInABlackholeOutageDoesNotWaitForALeaseReleaseUnderWay(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	d := &outageDialer{}
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial })
	if h := pool.Config().ConnConfig.Host; h == "" || h[0] == '/' {
		t.Skipf("needs a TCP connection to the test database, have host %q", h)
	}
	const timeout = 2 * time.Second
	var obs closeObserver
	c := e.clientOn(pool, &sentinel.Config{Owner: "closing", DefaultTTL: time.Minute, ReleaseTimeout: timeout, Observer: obs.observer()})
	releasing, err := c.Lease(ctx, "releasing")
	require.NoError(t, err)
	kept, err := c.Lease(ctx, "kept") // Close's to release
	require.NoError(t, err)

	took := closeBeside(t, c, d, func() error { return releasing.Release(context.Background()) },
		func() bool { return sentinel.ReleaseUnderWay(releasing) })
	t.Logf("Close took %s in the outage, ReleaseTimeout %s", took.Round(time.Millisecond), timeout)
	require.Less(t, took, timeout+timeout/2, "Close took %s with a Release under way, ReleaseTimeout %s", took, timeout)

	<-kept.Done()
	require.ErrorIs(t, kept.Err(), sentinel.ErrClosed)
	require.Equal(t, int32(1), obs.failed.Load(), "Close reports its own failed release only")
	// The Release was under way all along and still owns the lease:
	// Close did not end it.
	require.True(t, sentinel.ReleaseUnderWay(releasing), "the Release was not under way")
	require.NoError(t, releasing.Err())
}

// The same for a Turn: Close does not wait past its deadline for a
// Turn.Release under way, and leaves the turn to it.
func TestCloseInABlackholeOutageDoesNotWaitForATurnReleaseUnderWay(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	d := &outageDialer{}
	pool := e.pool(func(c *pgxpool.Config) { c.ConnConfig.DialFunc = d.dial })
	if h := pool.Config().ConnConfig.Host; h == "" || h[0] == '/' {
		t.Skipf("needs a TCP connection to the test database, have host %q", h)
	}
	const timeout = 2 * time.Second
	var obs closeObserver
	c := e.clientOn(pool, &sentinel.Config{Owner: "closing", DefaultTTL: time.Minute, ReleaseTimeout: timeout, Observer: obs.observer()})
	releasing, err := c.Turn(ctx, "releasing")
	require.NoError(t, err)
	kept, err := c.Turn(ctx, "kept") // Close's to give back
	require.NoError(t, err)

	took := closeBeside(t, c, d, func() error { return releasing.Release(context.Background()) },
		func() bool { return sentinel.TurnReleaseUnderWay(releasing) })
	t.Logf("Close took %s in the outage, ReleaseTimeout %s", took.Round(time.Millisecond), timeout)
	require.Less(t, took, timeout+timeout/2, "Close took %s with a Turn.Release under way, ReleaseTimeout %s", took, timeout)

	<-kept.Done()
	require.ErrorIs(t, kept.Err(), sentinel.ErrClosed)
	require.Equal(t, int32(1), obs.failed.Load(), "Close reports its own failed give-back only")
	require.True(t, sentinel.TurnReleaseUnderWay(releasing), "the Release was not under way")
	require.NoError(t, releasing.Err())
}
