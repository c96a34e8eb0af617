package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn returns Retryable but handing the key back fails: here
// Config.ReleaseTimeout runs out while another transaction holds the
// key's row lock. The caller got "X (and releasing the claim failed: ...
// context deadline exceeded)", which matched Retryable ("try again now")
// and not ErrUncertain, though the key stayed executing: a retry got
// ErrInProgress, then every later caller ErrUncertain, with nothing saying
// that fn had reported no effect. The key is now read back: it is still
// this attempt's, so the error matches ErrUncertain (not Retryable), wraps
// fn's error, and says that the key stays held until its lease expires,
// what later callers get, and that a hand-back still pending may land.
func TestRetryableWhoseHandBackFailsSaysTheKeyIsHeld(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{ReleaseTimeout: 200 * time.Millisecond})
	fnErr := errors.New("gateway said no before the charge")
	locked := make(chan struct{})
	unlock := make(chan struct{})
	lockDone := make(chan error, 1)
	_, err := sentinel.Once(ctx, c, "k", func(ctx context.Context) (int, error) {
		go func() {
			tx, err := admin.Begin(context.Background())
			if err == nil {
				_, err = tx.Exec(context.Background(), "SELECT 1 FROM "+e.table("executions")+" WHERE key = 'k' FOR UPDATE")
			}
			close(locked)
			<-unlock
			if tx != nil {
				_ = tx.Rollback(context.Background())
			}
			lockDone <- err
		}()
		<-locked
		return 0, sentinel.Retryable(fnErr)
	}, sentinel.WithTTL(2*time.Second), sentinel.WithHardTTL(time.Hour))
	close(unlock)
	require.NoError(t, <-lockDone)
	require.Error(t, err)
	t.Log(err)
	require.ErrorIs(t, err, fnErr)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.False(t, sentinel.IsRetryable(err), "a retry now gets ErrInProgress, then ErrUncertain")
	require.False(t, sentinel.ShouldRetry(err))
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, sentinel.StateExecuting, ee.State)
	require.False(t, ee.LeaseExpiresAt.IsZero(), "when the lease expires")
	require.Contains(t, err.Error(), "handing the key back failed")
	require.Contains(t, err.Error(), "until its lease expires")
	// The operator who finds the key uncertain sees that fn reported no
	// effect.
	events, err := c.LastRun(ctx, "k")
	require.NoError(t, err)
	found := false
	for _, ev := range events {
		if ev.Type == "retryable" && ev.Metadata["error"] == fnErr.Error() {
			found = true
		}
	}
	require.True(t, found, "%+v", events)
}

// A Once whose ctx ends just as its claim commits gives the claim back
// and returns ctx's error, "(claimed as it ended: given back)". When that
// give-back failed (here its statement never reached the server) the
// error still said "given back", though the key stayed in progress until
// its lease expired, and a Once's claim (executing) then read as
// uncertain, fn never having run: a caller retrying got ErrInProgress,
// then ErrUncertain, with nothing saying why. The error now says the
// give-back failed, that the key stays in its state until its lease
// expires and what comes after (Once: uncertain, reconcile it; OnceTx,
// whose claim is `claimed`: the next call runs fn); it still wraps ctx's
// cause.
func TestClaimAsCtxEndsWhoseGiveBackFailedSaysSo(t *testing.T) {
	for _, tc := range []struct {
		name, state, then string
		call              func(ctx context.Context, c *sentinel.Client, ran *bool) error
	}{
		{"Once", "executing", "reads as uncertain", func(ctx context.Context, c *sentinel.Client, ran *bool) error {
			_, err := sentinel.Once(ctx, c, "claimed-as-it-ended", func(context.Context) (int, error) { *ran = true; return 1, nil })
			return err
		}},
		{"OnceTx", "claimed", "a call after that runs fn", func(ctx context.Context, c *sentinel.Client, ran *bool) error {
			_, err := sentinel.OnceTx(ctx, c, "claimed-as-it-ended", func(context.Context, pgx.Tx) (int, error) { *ran = true; return 1, nil })
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			px := newFreezeProxy(t, dbURL)
			tr := &hookTracer{match: "once_claim_packed"}
			c := e.proxiedClient(px, tr, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 300 * time.Millisecond})
			octx, cancel := context.WithCancel(ctx)
			defer cancel()
			f := func() {
				px.arm("result_by_operator = CASE WHEN") // sqlFinish: the give-back never reaches the server
				cancel()
			}
			tr.hook.Store(&f)
			ran := false
			err := tc.call(octx, c, &ran)
			tr.hook.Store(nil)
			require.False(t, ran)
			require.ErrorIs(t, err, context.Canceled)
			t.Log(err)
			require.True(t, px.frozen(), "the give-back was not sent")
			require.Equal(t, 1, e.count("executions", "key = 'claimed-as-it-ended' AND state = '"+tc.state+"' AND lease_expires_at > now()"),
				"the key is still in progress")
			require.NotContains(t, err.Error(), ": given back)", "the error said given back")
			require.ErrorContains(t, err, "giving it back failed")
			require.ErrorContains(t, err, "the key stays "+tc.state+" until its lease expires")
			require.ErrorContains(t, err, tc.then)
		})
	}
}

// The same for a claim that lands as the client closes: Close began
// while the claim was in flight, so fn does not run and the claim is given
// back. The call returned ErrClosed alone when that give-back failed,
// though the key stayed executing until its lease expired and then read
// as uncertain. The error now says so, and still matches ErrClosed.
func TestClaimAsClientClosesWhoseGiveBackFailedSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	px := newFreezeProxy(t, dbURL)
	tr := &hookTracer{match: "once_claim_packed("}
	c := e.proxiedClient(px, tr, &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 300 * time.Millisecond})
	f := func() {
		px.arm("result_by_operator = CASE WHEN") // sqlFinish: the give-back never reaches the server
		go c.Close()
		time.Sleep(200 * time.Millisecond) // Close has begun
	}
	tr.hook.Store(&f)
	ran := false
	_, err := sentinel.Once(ctx, c, "claimed-as-closed", func(context.Context) (int, error) { ran = true; return 1, nil })
	tr.hook.Store(nil)
	require.False(t, ran)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	t.Log(err)
	require.True(t, px.frozen(), "the give-back was not sent")
	require.Equal(t, 1, e.count("executions", "key = 'claimed-as-closed' AND state = 'executing' AND lease_expires_at > now()"),
		"the key is still in progress")
	require.ErrorContains(t, err, "giving it back failed")
	require.ErrorContains(t, err, "reads as uncertain")
}

// cutTracer, when armed, ends the claim's connection as the claim's reply
// arrives (its backend terminated, and gone), then calls then: the next
// statement on that connection fails with a dropped connection.
type cutTracer struct {
	match string
	then  atomic.Pointer[func()]
	t     *testing.T
}

func (c *cutTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.match) {
		return context.WithValue(ctx, c, true)
	}
	return ctx
}

func (c *cutTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(c) == nil {
		return
	}
	if f := c.then.Swap(nil); f != nil {
		terminateAbandoned(c.t, int32(conn.PgConn().PID()))
		(*f)()
	}
}

// A claim that lands as the caller's ctx ends (or as the client closes)
// is given back before fn runs. That give-back got one attempt: finish
// retries transient errors until the lease's deadline, and a lease never
// registered with the heartbeat has none (the zero time), so one dropped
// connection left the key executing until its lease expired, then
// uncertain, though fn never ran. The give-back is now retried, as a
// completion is, within ReleaseTimeout and the claim's expiry.
func TestClaimGiveBackIsRetriedAfterADroppedConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool
	}{{"ctx ended", false}, {"client closed", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			tr := &cutTracer{match: "once_claim_packed", t: t}
			c := e.clientOn(e.pool(func(c *pgxpool.Config) {
				c.MaxConns = 1 // the give-back goes on the claim's connection, cut
				c.ConnConfig.Tracer = tr
			}), &sentinel.Config{DefaultTTL: time.Minute, ReleaseTimeout: 10 * time.Second})
			octx, cancel := context.WithCancel(ctx)
			defer cancel()
			f := func() { cancel() }
			if tc.close {
				f = func() {
					go c.Close()
					time.Sleep(200 * time.Millisecond) // Close has begun
				}
			}
			tr.then.Store(&f)
			ran := false
			_, err := sentinel.Once(octx, c, "claimed-as-cut", func(context.Context) (int, error) { ran = true; return 1, nil })
			require.Nil(t, tr.then.Load(), "the claim's connection was not cut")
			require.False(t, ran)
			t.Log(err)
			if tc.close {
				require.ErrorIs(t, err, sentinel.ErrClosed)
			} else {
				require.ErrorIs(t, err, context.Canceled)
			}
			require.NotContains(t, err.Error(), "giving it back failed")
			require.Equal(t, 1, e.count("executions", "key = 'claimed-as-cut' AND state = 'claimed' AND lease_expires_at <= now()"),
				"the key is given back: claimed, its lease ended")
		})
	}
}
