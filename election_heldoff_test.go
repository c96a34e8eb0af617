package sentinel_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An elector that resigned while no follower was registered released its
// term, and is held off for a TTL. Another elector takes the released term
// and resigns in turn, with nobody registered either: the group is
// leaderless until some elector campaigns. The first one slept until its
// hold-off ended, not registered as waiting (registration needed a live
// term), so that release woke nobody: the group stayed leaderless for up
// to a TTL, against Resign's "one of them takes over within
// milliseconds". The held-off elector now registers as waiting on its own
// released row, and the second resignation wakes it.
func TestElectorHeldOffAfterResigningIsWokenByTheNextRelease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 6 * time.Second
	ca, cb := e.client(&sentinel.Config{DefaultTTL: ttl}), e.client(&sentinel.Config{DefaultTTL: ttl})
	a, err := ca.Elector("heldoff", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	require.NoError(t, a.Resign(ctx)) // nobody registered: the term is released
	require.False(t, a.IsLeader())

	b, err := cb.Elector("heldoff", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to take the released term", b.IsLeader)
	require.False(t, a.IsLeader())
	begin := time.Now()
	require.NoError(t, b.Resign(ctx))
	waitFor(t, ttl, "a to lead again", a.IsLeader)
	took := time.Since(begin)
	t.Logf("a leads %s after b resigned", took)
	require.Less(t, took, ttl/3, "the held-off elector slept until its hold-off ended")
}

// The same held-off elector, woken by the second release, read the group's
// row (a campaign it may not win yet, held off) and saw that another
// elector had led since it resigned: its hold-off was over, and it would
// campaign again at once. It first registered as waiting (sqlElectionWait),
// a round trip for a sleep it did not take, on the way to the group's next
// term: the takeover took three round trips instead of two. It now
// campaigns again straight away.
func TestElectorHeldOffTakesOverWithoutRegisteringFirst(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = 10 * time.Second
	log := &electionSQLLog{}
	ca := e.clientOn(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = log }), &sentinel.Config{DefaultTTL: ttl})
	cb := e.client(&sentinel.Config{DefaultTTL: ttl})
	a, err := ca.Elector("heldoff-reg", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, a)
	waitFor(t, 10*time.Second, "a to lead", a.IsLeader)
	require.NoError(t, a.Resign(ctx)) // nobody registered: the term is released
	// a, held off, registers as waiting on its own released row: the next
	// release wakes it.
	waitFor(t, 10*time.Second, "a to register as waiting", func() bool {
		return e.count("leaders", "election = 'heldoff-reg' AND waiting_until > now()") == 1
	})

	b, err := cb.Elector("heldoff-reg", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, b)
	waitFor(t, 10*time.Second, "b to take the released term", b.IsLeader)
	log.take()
	require.NoError(t, b.Resign(ctx))
	waitFor(t, ttl/2, "a to lead again", a.IsLeader)
	require.Zero(t, log.take(), "a registered as waiting between b's release and its own election")
}

// electionSQLLog counts the wait registrations (sqlElectionWait) a pool sends.
type electionSQLLog struct{ waits atomic.Int64 }

func (s *electionSQLLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "SET waiting_until") {
		s.waits.Add(1)
	}
	return ctx
}

func (s *electionSQLLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the registrations sent since the last call.
func (s *electionSQLLog) take() int64 { return s.waits.Swap(0) }
