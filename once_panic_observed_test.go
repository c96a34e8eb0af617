package sentinel_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// logger.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A panic in fn leaves a Once key uncertain (and frees an OnceTx key):
// the observer (metrics, the span) must say so, not report "ran" with no
// error, and the Warn log names the uncertain key as for any other way
// an execution becomes uncertain.
func TestPanicInFnIsObservedAndLogged(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var onces []sentinel.OnceEvent
	var logs lockedBuffer
	c := e.client(&sentinel.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Observer: &sentinel.Observer{OnceEnd: func(_ context.Context, ev sentinel.OnceEvent) {
			mu.Lock()
			defer mu.Unlock()
			onces = append(onces, ev)
		}},
	})
	repanics := func(f func()) {
		t.Helper()
		defer func() { require.Equal(t, "kaboom", recover()) }()
		f()
	}
	repanics(func() {
		_, _ = sentinel.Once(ctx, c, "once-panics", func(context.Context) (int, error) { panic("kaboom") })
	})
	repanics(func() {
		_, _ = sentinel.OnceTx(ctx, c, "tx-panics", func(context.Context, pgx.Tx) (int, error) { panic("kaboom") })
	})
	_, err := sentinel.Once(ctx, c, "once-panics", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrUncertain, "the panic left the key uncertain")

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(onces), 2)
	require.Equal(t, sentinel.OutcomeUncertain, onces[0].Outcome, "Once's panic: %+v", onces[0])
	require.ErrorIs(t, onces[0].Err, sentinel.ErrUncertain)
	require.ErrorContains(t, onces[0].Err, "kaboom")
	require.Equal(t, sentinel.OutcomeError, onces[1].Outcome, "OnceTx's panic (rolled back): %+v", onces[1])
	require.ErrorContains(t, onces[1].Err, "kaboom")
	require.Contains(t, logs.String(), "execution outcome uncertain")
	require.Contains(t, logs.String(), "once-panics")
}
