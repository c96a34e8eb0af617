package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// syncRepCluster is a private cluster on which a commit can be made to
// wait for a synchronous standby that never connects.
type syncRepCluster struct {
	t     *testing.T
	cl    *pgtemp.Cluster
	admin *pgx.Conn
}

func newSyncRepCluster(t *testing.T) *syncRepCluster {
	ctx := ctxT(t)
	cl, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Skipf("no local PostgreSQL binaries for a private cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	admin, err := pgx.Connect(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, "CREATE TABLE sync_probe (x int)")
	require.NoError(t, err)
	return &syncRepCluster{t: t, cl: cl, admin: admin}
}

// setSyncStandby sets synchronous_standby_names and reloads. With a name,
// it returns once commits wait for that standby (the server applies a
// reload asynchronously): a probe's commit is seen waiting in SyncRep,
// then cancelled (it commits, with a warning).
func (s *syncRepCluster) setSyncStandby(name string) {
	ctx := ctxT(s.t)
	_, err := s.admin.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+name+"'") // a name of the test's: no quote
	require.NoError(s.t, err)
	_, err = s.admin.Exec(ctx, "SELECT pg_catalog.pg_reload_conf()")
	require.NoError(s.t, err)
	if name == "" {
		return
	}
	probe, err := pgx.Connect(ctx, s.cl.URL())
	require.NoError(s.t, err)
	defer probe.Close(context.Background())
	for {
		done := make(chan error, 1)
		go func() { _, err := probe.Exec(ctx, "INSERT INTO sync_probe VALUES (1)"); done <- err }() // writes WAL: waits
		waiting := false
		for deadline := time.Now().Add(500 * time.Millisecond); !waiting && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			require.NoError(s.t, s.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
				WHERE pid = $1 AND wait_event = 'SyncRep')`, probe.PgConn().PID()).Scan(&waiting))
		}
		if waiting {
			_, err = s.admin.Exec(ctx, "SELECT pg_catalog.pg_cancel_backend($1)", probe.PgConn().PID())
			require.NoError(s.t, err)
		}
		require.NoError(s.t, <-done)
		if waiting {
			return
		}
		require.NoError(s.t, ctx.Err(), "commits never waited for the synchronous standby")
	}
}

// commitThenTerminate makes every commit wait in SyncRep, runs send (which
// sends the batch whose statement starts with stmt), terminates the backend
// whose commit of that batch waits, then lets commits go again: the batch
// committed locally, and its client read FATAL 57P01 instead of the reply.
func (s *syncRepCluster) commitThenTerminate(stmt string, send func()) {
	ctx := ctxT(s.t)
	s.setSyncStandby("nobody")
	send()
	var pid int32
	require.Eventually(s.t, func() bool {
		err := s.admin.QueryRow(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity
			WHERE wait_event = 'SyncRep' AND left(query, 120) = left($1, 120)`, stmt).Scan(&pid)
		return err == nil
	}, 20*time.Second, 2*time.Millisecond, "the batch's commit waits in SyncRep")
	var ok bool
	require.NoError(s.t, s.admin.QueryRow(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", pid).Scan(&ok))
	require.True(s.t, ok)
	// Let commits go only once the backend is gone: released from its
	// wait before it saw the signal, it would commit and answer as usual.
	require.Eventually(s.t, func() bool {
		var alive bool
		return s.admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1)", pid).Scan(&alive) == nil && !alive
	}, 20*time.Second, 2*time.Millisecond, "the terminated backend exits")
	s.setSyncStandby("")
}

// unknownOutcome asserts that err reports the batch's lost reply (the
// connection ended: the server closed it, or PgBouncer said 08P01 "server
// conn crashed?"), not an outcome read from its own orphaned write.
func unknownOutcome(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	var pgErr *pgconn.PgError
	require.True(t, errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &pgErr) && pgErr.Code == "08P01", "%s: %v", what, err)
}

// inParallel runs f(0), ..., f(n-1) on goroutines of their own; wait
// waits for them and returns their errors.
func inParallel(n int, f func(i int) error) (wait func() []error) {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	return func() []error { wg.Wait(); return errs }
}

// Issue 26.8: a batch whose commit is local but whose reply was lost
// (its backend terminated while the commit waited for a synchronous
// standby: WARNING "... already committed locally ...", FATAL 57P01) has
// an unknown outcome for every caller, as a dropped connection does. It
// was resent statement by statement, so each caller got the outcome of
// meeting its own orphaned write: a claim "in progress", a release "lost",
// a grant "held", a give-back "moved on".
//
// PostgreSQL itself closes the connection without an error message (the
// backend stops writing to the client once its commit is local), which
// the coalescer always took for an unknown outcome. Through PgBouncer the
// client reads an error instead, ERROR 08P01 "server conn crashed?", which
// it took for "nothing of the batch committed".
func TestCoalescedBatchCommittedLocallyIsUnknown(t *testing.T) {
	s := newSyncRepCluster(t)
	t.Run("direct", func(t *testing.T) { s.committedLocally(t, s.cl.URL(), "direct", pgx.QueryExecModeCacheStatement) })
	t.Run("pgbouncer", func(t *testing.T) {
		b, err := pgtemp.StartBouncer(ctxT(t), s.cl.Port(), 8)
		if errors.Is(err, pgtemp.ErrNoBouncer) {
			t.Skip(err)
		}
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		mode := pgx.QueryExecModeExec // pgx's cached statements need pgbouncer >= 1.21
		if b.SupportsPrepared {
			mode = pgx.QueryExecModeCacheStatement
		}
		s.committedLocally(t, b.URL(), "bouncer", mode)
	})
}

func (s *syncRepCluster) committedLocally(t *testing.T, url, schema string, mode pgx.QueryExecMode) {
	ctx := ctxT(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = mode
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	const ttl = 3 * time.Second
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema, DefaultTTL: ttl, DisableListen: true, WaitRecheck: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctx))
	const n = 4

	t.Run("claims", func(t *testing.T) {
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoClaim)
		var ran atomic.Int32
		wait := inParallel(n, func(i int) error {
			_, err := sentinel.Once(ctx, c, fmt.Sprintf("claim-%d", i), func(context.Context) (int, error) {
				ran.Add(1)
				return i, nil
			})
			return err
		})
		waitQueued(t, queued, sentinel.CoClaim, n)
		s.commitThenTerminate(sentinel.SetSQL(c, sentinel.CoClaim), release)
		errs := wait()
		require.Zero(t, ran.Load(), "fn never ran (%v)", errs)
		for i, err := range errs {
			require.NotErrorIs(t, err, sentinel.ErrInProgress, "claim %d", i)
			unknownOutcome(t, err, fmt.Sprintf("claim %d", i))
		}
	})

	t.Run("grants", func(t *testing.T) {
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoAcquire)
		wait := inParallel(n, func(i int) error {
			l, err := c.Lease(ctx, fmt.Sprintf("grant-%d", i))
			if l != nil {
				_ = l.Release(ctx)
			}
			return err
		})
		waitQueued(t, queued, sentinel.CoAcquire, n)
		s.commitThenTerminate(sentinel.SetSQL(c, sentinel.CoAcquire), release)
		for i, err := range wait() {
			require.NotErrorIs(t, err, sentinel.ErrNotAcquired, "grant %d", i)
			unknownOutcome(t, err, fmt.Sprintf("grant %d", i))
		}
	})

	t.Run("releases", func(t *testing.T) {
		leases := make([]*sentinel.Lease, n)
		for i := range leases {
			leases[i], err = c.Lease(ctx, fmt.Sprintf("release-%d", i))
			require.NoError(t, err)
		}
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoRelease)
		wait := inParallel(n, func(i int) error { return leases[i].Release(ctx) })
		waitQueued(t, queued, sentinel.CoRelease, n)
		s.commitThenTerminate(sentinel.SetSQL(c, sentinel.CoRelease), release)
		for i, err := range wait() {
			require.NotErrorIs(t, err, sentinel.ErrLeaseLost, "release %d: no other holder ever had it", i)
			unknownOutcome(t, err, fmt.Sprintf("release %d", i))
			// It committed: the key is free now.
			l, err := c.Lease(ctx, fmt.Sprintf("release-%d", i))
			require.NoError(t, err, "release %d committed", i)
			require.NoError(t, l.Release(ctx))
		}
	})

	t.Run("give-backs", func(t *testing.T) {
		// fn says nothing happened: the key goes back for the next caller.
		// The give-back committed, its reply was lost: the caller learns
		// fn's error, as when the give-back's reply arrives.
		entered := make(chan struct{}, n)
		proceed := make(chan struct{})
		errNothing := errors.New("provider unreachable, nothing sent")
		wait := inParallel(n, func(i int) error {
			for {
				ran := false
				_, err := sentinel.Once(ctx, c, fmt.Sprintf("giveback-%d", i), func(context.Context) (int, error) {
					ran = true
					entered <- struct{}{}
					<-proceed
					return 0, sentinel.Retryable(errNothing)
				})
				if ran || ctx.Err() != nil {
					return err
				}
				// The claim failed (a server connection PgBouncer found
				// closed after an earlier subtest): claim again.
				time.Sleep(50 * time.Millisecond)
			}
		})
		for range n {
			<-entered
		}
		queued, release := sentinel.HoldCoalescer(c, sentinel.CoFinish)
		close(proceed)
		waitQueued(t, queued, sentinel.CoFinish, n)
		s.commitThenTerminate(sentinel.SetSQL(c, sentinel.CoFinish), release)
		for i, err := range wait() {
			require.ErrorIs(t, err, errNothing, "give-back %d", i)
			require.NotErrorIs(t, err, sentinel.ErrWrongState, "give-back %d: %v", i, err)
			ex, rerr := c.Inspect(ctx, fmt.Sprintf("giveback-%d", i))
			require.NoError(t, rerr)
			require.Equal(t, sentinel.StateClaimed, ex.State)
			require.False(t, ex.LeaseAlive)
		}
	})
}
