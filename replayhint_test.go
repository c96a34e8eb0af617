package sentinel_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// sqlLog records the statements a pool sends, as "claim", "read",
// "finish" or "other" (by what they do to the executions table).
type sqlLog struct {
	mu   sync.Mutex
	sent []string
}

func (s *sqlLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	kind := "other"
	switch q := d.SQL; {
	case strings.Contains(q, "once_claim_packed("):
		kind = "claim"
	case strings.Contains(q, "UPDATE") && strings.Contains(q, ".executions"):
		kind = "finish"
	case strings.Contains(q, ".executions t WHERE t.namespace = $1 AND t.key = $2") && !strings.Contains(q, "UPDATE"):
		kind = "read"
	}
	s.mu.Lock()
	s.sent = append(s.sent, kind)
	s.mu.Unlock()
	return ctx
}

func (s *sqlLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns what was sent since the last call.
func (s *sqlLog) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

func loggedClient(e *env) (*sentinel.Client, *sqlLog) {
	log := &sqlLog{}
	c := e.clientOn(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = log }), nil)
	return c, log
}

// A key this client completed, or saw completed, is replayed with one
// primary-key read; a key it never saw, with the claim statement (which
// then only reads); either way one statement and the same result.
func TestReplayOfAKeySeenCompletedIsOneRead(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, logA := loggedClient(e)
	b, logB := loggedClient(e)
	runs := 0
	charge := func(context.Context) (int, error) { runs++; return 42, nil }

	res, err := sentinel.Once(ctx, a, "pay-1", charge)
	require.NoError(t, err)
	require.False(t, res.Cached)
	require.Equal(t, []string{"claim", "finish"}, logA.take(), "a fresh key")

	res, err = sentinel.Once(ctx, a, "pay-1", charge)
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, 42, res.Value)
	require.Equal(t, []string{"read"}, logA.take(), "a replay by the client that completed the key")

	// b never saw the key: its first replay is the claim statement, its
	// next ones the read.
	for i, want := range []string{"claim", "read", "read"} {
		res, err = sentinel.Once(ctx, b, "pay-1", charge)
		require.NoError(t, err)
		require.True(t, res.Cached)
		require.Equal(t, 42, res.Value)
		require.Equal(t, []string{want}, logB.take(), "b's replay %d", i)
	}
	require.Equal(t, 1, runs)

	// OnceTx: its completion commits with fn's transaction; the client
	// remembers the key once that commit succeeded.
	_, err = sentinel.OnceTx(ctx, a, "tx-1", func(context.Context, pgx.Tx) (int, error) { return 7, nil })
	require.NoError(t, err)
	logA.take()
	resTx, err := sentinel.OnceTx(ctx, a, "tx-1", func(context.Context, pgx.Tx) (int, error) { return 0, nil })
	require.NoError(t, err)
	require.True(t, resTx.Cached)
	require.Equal(t, 7, resTx.Value)
	require.Equal(t, []string{"read"}, logA.take(), "an OnceTx replay by the client that completed the key")
}

// A hint is a guess, never an outcome: when the key was removed (Prune,
// or an operator) or moved out of completed behind the client's back, the
// read finds out and the call goes on exactly as a client without the
// hint would (one round trip more).
func TestReplayHintWrongFallsBackToTheClaim(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a, logA := loggedClient(e)
	runs := 0
	charge := func(context.Context) (int, error) { runs++; return 7, nil }

	_, err := sentinel.Once(ctx, a, "gone", charge)
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, a, "reconciled", charge)
	require.NoError(t, err)
	logA.take()

	// Removed: a fresh key again, run once more.
	_, err = admin.Exec(ctx, "DELETE FROM "+e.table("executions")+" WHERE key = 'gone'")
	require.NoError(t, err)
	res, err := sentinel.Once(ctx, a, "gone", charge)
	require.NoError(t, err)
	require.False(t, res.Cached)
	require.Equal(t, 3, runs)
	require.Equal(t, []string{"read", "claim", "finish"}, logA.take())

	// Moved to reconciling: the same error as a client that never saw it.
	_, err = admin.Exec(ctx, "UPDATE "+e.table("executions")+" SET state = 'reconciling' WHERE key = 'reconciled'")
	require.NoError(t, err)
	_, errA := sentinel.Once(ctx, a, "reconciled", charge)
	require.ErrorIs(t, errA, sentinel.ErrReconciling)
	require.Equal(t, []string{"read", "claim"}, logA.take())
	_, errB := sentinel.Once(ctx, e.client(nil), "reconciled", charge)
	require.ErrorIs(t, errB, sentinel.ErrReconciling)
	require.Equal(t, errB.Error(), errA.Error())
	// The hint is gone: the next call sends the claim first.
	_, err = sentinel.Once(ctx, a, "reconciled", charge)
	require.ErrorIs(t, err, sentinel.ErrReconciling)
	require.Equal(t, []string{"claim"}, logA.take())
	require.Equal(t, 3, runs)
}
