package sentinel_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// closeWhileRunning runs work on a fresh client with its logs captured,
// calls Client.Close once work has started, then runs during (work is
// still running: its ctx cancelled, not yet returned), then lets work
// return. It returns the logs and work's error.
func closeWhileRunning(t *testing.T, e *env, work func(c *sentinel.Client, started func(), cut <-chan struct{}) error, during func()) (logs string, err error) {
	t.Helper()
	var buf lockedBuffer
	c := e.client(&sentinel.Config{DefaultTTL: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	started, cut := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- work(c, func() { close(started) }, cut) }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("work ended before it started: %v", err)
	}
	c.Close()
	during()
	close(cut)
	err = <-done
	return buf.String(), err
}

// warns returns the Warn lines of logs.
func warns(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") {
			out = append(out, line)
		}
	}
	return out
}

// Client.Close while a Once's or OnceTx's fn runs ends its execution
// lease (fn's ctx is cancelled) but neither frees nor gives the key to
// anyone: the row stays this attempt's until its lease expires. A fn that
// returns within that time has its outcome recorded as usual (Once), or
// rolled back and the key freed for the next call (OnceTx). Close logged
// a Warn "lease ended ... lost: client closed" for each at every deploy,
// although nothing was lost and nobody could take the key meanwhile. It
// is now an Info that says what happens to the key and what, if
// anything, to do; a call whose key does end uncertain still logs that
// Warn, once.
func TestCloseDuringOnceLogsNoLoss(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	other := e.client(nil)

	// A Once whose fn finishes its step after Close began: it completes.
	var res sentinel.Result[int]
	logs, err := closeWhileRunning(t, e, func(c *sentinel.Client, started func(), cut <-chan struct{}) error {
		var err error
		res, err = sentinel.Once(ctx, c, "charge", func(ctx context.Context) (int, error) {
			started()
			<-ctx.Done()
			<-cut
			return 42, nil
		})
		return err
	}, func() {
		_, err := sentinel.Once(ctx, other, "charge", func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, err, sentinel.ErrInProgress, "nobody else may run the key while fn still runs")
	})
	require.NoError(t, err)
	require.Equal(t, 42, res.Value)
	again, err := sentinel.Once(ctx, other, "charge", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.True(t, again.Cached)
	require.Equal(t, 42, again.Value, "fn's outcome was recorded")
	require.Empty(t, warns(logs), "nothing was lost: no Warn")
	require.Contains(t, logs, "level=INFO")
	require.Contains(t, logs, "key=charge")
	require.Contains(t, logs, "running Once")

	// A Once whose fn stops with its ctx's error: the key is uncertain,
	// which is the one Warn.
	logs, err = closeWhileRunning(t, e, func(c *sentinel.Client, started func(), cut <-chan struct{}) error {
		_, err := sentinel.Once(ctx, c, "ship", func(ctx context.Context) (int, error) {
			started()
			<-ctx.Done()
			<-cut
			return 0, ctx.Err()
		})
		return err
	}, func() {})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	w := warns(logs)
	require.Len(t, w, 1, "one Warn, the uncertain key's: %s", logs)
	require.Contains(t, w[0], "execution outcome uncertain")

	// An OnceTx: fn's transaction rolls back, and the key is free for
	// the next call, at once.
	logs, err = closeWhileRunning(t, e, func(c *sentinel.Client, started func(), cut <-chan struct{}) error {
		_, err := sentinel.OnceTx(ctx, c, "book", func(ctx context.Context, tx pgx.Tx) (int, error) {
			started()
			<-ctx.Done()
			<-cut
			return 42, nil
		})
		return err
	}, func() {
		_, err := sentinel.OnceTx(ctx, other, "book", func(context.Context, pgx.Tx) (int, error) { return 1, nil })
		require.ErrorIs(t, err, sentinel.ErrInProgress, "nobody else may run the key while fn still runs")
	})
	require.ErrorIs(t, err, sentinel.ErrClosed, "nothing was committed")
	require.Contains(t, err.Error(), "Client.Close cut fn's transaction off before its completion: rolled back, nothing was committed, and the key is given back",
		"the error says Close, not a completion refused")
	next, err := sentinel.OnceTx(ctx, other, "book", func(context.Context, pgx.Tx) (int, error) { return 7, nil })
	require.NoError(t, err)
	require.False(t, next.Cached, "the key was given back: the next call runs fn")
	require.Empty(t, warns(logs), "nothing was lost: no Warn")
	require.Contains(t, logs, "running OnceTx")
	require.Contains(t, logs, "nothing needs doing")
}
