package sentinel_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// cancelOnStatement cancels a ctx when a statement containing marker
// starts on the pool it traces.
type cancelOnStatement struct {
	marker string
	mu     sync.Mutex
	cancel context.CancelFunc
}

func (c *cancelOnStatement) arm(cancel context.CancelFunc) {
	c.mu.Lock()
	c.cancel = cancel
	c.mu.Unlock()
}

func (c *cancelOnStatement) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, c.marker) {
		c.mu.Lock()
		if c.cancel != nil {
			c.cancel()
		}
		c.mu.Unlock()
	}
	return ctx
}

func (c *cancelOnStatement) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A waiter whose ctx ends while it counts itself in on the claim it found
// in progress (the statement after the claim, before the wait) gets what
// a waiter whose ctx ends during the wait gets: ctx's error and
// ErrInProgress, the key's state as the claim read it. It used to get
// "wait for ...: context canceled" alone, so a caller that tells a busy
// key (retry later) from a failure by ErrInProgress took it for a failure.
func TestOnceWaitCtxEndingWhileCountingInSaysInProgress(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(nil)
	tr := &cancelOnStatement{marker: "waiters = t.waiters + 1"}
	b := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), nil)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, a, "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		}, sentinel.WithTTL(time.Minute))
		done <- err
	}()
	<-started
	defer func() { close(release); require.NoError(t, <-done) }()

	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	tr.arm(cancel)
	_, err := sentinel.Once(waitCtx, b, "k", func(context.Context) (int, error) { return 2, nil }, sentinel.WithWait())
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, sentinel.ErrInProgress, "%v", err)
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee, "the holder and token, as a waiter whose ctx ended in the wait gets them")
}
