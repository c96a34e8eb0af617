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
