package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A lease waiter (WithWait) whose ctx ends (Ctrl-C under
// signal.NotifyContext) is told that its registration was withdrawn, as a
// Turn's waiter is told its ticket left the queue: the error said only
// ctx's cause and the last holder, and a job loop's log could not tell
// whether the next release would hand the key to nobody.
func TestLeaseWaitCancelledToldRegistrationWithdrawn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	held, err := holder.Lease(ctx, "plotter")
	require.NoError(t, err)
	defer held.Release(ctx)
	c := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})

	cause := errors.New("interrupt signal received")
	wctx, cancel := context.WithCancelCause(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Lease(wctx, "plotter", sentinel.WithWait())
		gone <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'plotter'") == 1
	})
	cancel(cause)
	err = <-gone
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)
	require.Contains(t, err.Error(), "registration withdrawn", "the error does not say the registration was withdrawn")
	require.Zero(t, e.count("lease_waiters", "key = 'plotter'"), "the registration said withdrawn is still there")
}

// startHook calls before(sql) when a statement of its pool starts, on the
// goroutine that sends it, before it is sent.
type startHook struct {
	before atomic.Pointer[func(sql string)]
}

func (h *startHook) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if f := h.before.Load(); f != nil {
		(*f)(d.SQL)
	}
	return ctx
}

func (h *startHook) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A waiter that gives up after a release granted it the key, before its
// withdrawal ran, finds the grant and releases it (the key passes on): its
// error says so, not "withdrawn", which would be untrue (the release had
// deleted the registration), and not nothing, which would hide that the
// key was its own for a moment.
func TestLeaseWaitCancelledAfterAGrantSaysItWasReleased(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	holder := e.client(&sentinel.Config{DefaultTTL: 30 * time.Second})
	held, err := holder.Lease(ctx, "lathe")
	require.NoError(t, err)
	hook := &startHook{}
	c := e.clientOn(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = hook }), &sentinel.Config{DefaultTTL: 30 * time.Second})
	leave := sentinel.WaitLeaveSQL(c)
	var once sync.Once
	f := func(sql string) {
		if sql != leave {
			return
		}
		// The waiter gave up and is about to withdraw: the holder's
		// release hands the key to its registration first.
		once.Do(func() { assert.NoError(t, held.Release(ctx)) })
	}
	hook.before.Store(&f)

	wctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Lease(wctx, "lathe", sentinel.WithWait())
		gone <- err
	}()
	waitFor(t, 10*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'lathe'") == 1
	})
	cancel()
	err = <-gone
	hook.before.Store(nil)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, strings.Contains(err.Error(), "granted it the key meanwhile: released"), "the error does not say the grant was released: %v", err)
	require.NotContains(t, err.Error(), "registration withdrawn")
	_, err = holder.Holder(ctx, "lathe")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was not released")
	require.Zero(t, e.count("lease_waiters", "key = 'lathe'"))
}
