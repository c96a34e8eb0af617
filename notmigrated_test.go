package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Issue 17.7: on a schema that was never migrated (a wrong Config.Schema,
// or Migrate never ran) every entry point returns an error matching
// ErrNotMigrated, promptly: none returns the raw "relation does not exist",
// and none that waits or retries (Lease WithWait, Turn, Follow,
// Elector.Run, ...) hangs.
func TestEveryEntryPointReportsNotMigrated(t *testing.T) {
	e := &env{t: t, schema: "nope_" + uuid.NewString()[:8], stmts: &counter{}}
	c := e.client(&sentinel.Config{DefaultTTL: time.Second})
	pool := c.Pool()
	h := sentinel.LeaseHandle{Namespace: "default", Key: "k", Owner: c.Owner(), Token: 1}
	one := func(context.Context) (int, error) { return 1, nil }
	none := func(sentinel.Event) error { return nil }
	el, err := c.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	calls := map[string]func(ctx context.Context) error{
		"Lease":          func(ctx context.Context) error { _, err := c.Lease(ctx, "k"); return err },
		"Lease WithWait": func(ctx context.Context) error { _, err := c.Lease(ctx, "k", sentinel.WithWait()); return err },
		"Do": func(ctx context.Context) error {
			return c.Do(ctx, "k", func(context.Context, *sentinel.Lease) error { return nil })
		},
		"Holder":               func(ctx context.Context) error { _, err := c.Holder(ctx, "k"); return err },
		"RenewHandle":          func(ctx context.Context) error { _, err := c.RenewHandle(ctx, h, time.Second); return err },
		"ReleaseHandle":        func(ctx context.Context) error { return c.ReleaseHandle(ctx, h) },
		"VerifyToken":          func(ctx context.Context) error { return c.VerifyToken(ctx, pool, "k", 1) },
		"VerifyExecutionToken": func(ctx context.Context) error { return c.VerifyExecutionToken(ctx, pool, "k", 1) },
		"Once":                 func(ctx context.Context) error { _, err := sentinel.Once(ctx, c, "k", one); return err },
		"Once WithWait": func(ctx context.Context) error {
			_, err := sentinel.Once(ctx, c, "k", one, sentinel.WithWait())
			return err
		},
		"OnceRetry": func(ctx context.Context) error {
			_, err := sentinel.OnceRetry(ctx, c, "k", one, sentinel.RetryOptions{})
			return err
		},
		"Inspect":        func(ctx context.Context) error { _, err := c.Inspect(ctx, "k"); return err },
		"History":        func(ctx context.Context) error { _, err := c.History(ctx, "k"); return err },
		"LastRun":        func(ctx context.Context) error { _, err := c.LastRun(ctx, "k"); return err },
		"Prune":          func(ctx context.Context) error { _, err := c.Prune(ctx, time.Hour); return err },
		"Reconcile":      func(ctx context.Context) error { _, err := c.Reconcile(ctx, "k"); return err },
		"ForceComplete":  func(ctx context.Context) error { return c.ForceComplete(ctx, "k", 1) },
		"ResetToClaimed": func(ctx context.Context) error { return c.ResetToClaimed(ctx, "k") },
		"SetResult":      func(ctx context.Context) error { return c.SetResult(ctx, "k", 1) },
		"Executions": func(ctx context.Context) error {
			_, _, err := c.Executions(ctx, sentinel.ExecutionFilter{})
			return err
		},
		"ExecutionCounts": func(ctx context.Context) error { _, err := c.ExecutionCounts(ctx, "", false); return err },
		"Leases":          func(ctx context.Context) error { _, err := c.Leases(ctx, sentinel.LeaseFilter{}); return err },
		"Follow":          func(ctx context.Context) error { return c.Follow(ctx, sentinel.FollowFilter{}, none) },
		"Follow After":    func(ctx context.Context) error { return c.Follow(ctx, sentinel.FollowFilter{After: 5}, none) },
		"Follow Cursor":   func(ctx context.Context) error { return c.Follow(ctx, sentinel.FollowFilter{Cursor: "5:2"}, none) },
		"Turn":            func(ctx context.Context) error { _, err := c.Turn(ctx, "r"); return err },
		"TurnAll":         func(ctx context.Context) error { _, err := c.TurnAll(ctx, []string{"a", "b"}); return err },
		"Queue":           func(ctx context.Context) error { _, err := c.Queue(ctx, "r"); return err },
		"Queues":          func(ctx context.Context) error { _, err := c.Queues(ctx); return err },
		"ResetQueue":      func(ctx context.Context) error { _, err := c.ResetQueue(ctx, "r"); return err },
		"ResetQueues":     func(ctx context.Context) error { _, err := c.ResetQueues(ctx); return err },
		"QueueHistory":    func(ctx context.Context) error { _, err := c.QueueHistory(ctx, "r", 0, 10); return err },
		"VerifyTurn":      func(ctx context.Context) error { return c.VerifyTurn(ctx, pool, "r", 1) },
		"Leader":          func(ctx context.Context) error { _, err := c.Leader(ctx, "scheduler"); return err },
		"Members":         func(ctx context.Context) error { _, err := c.Members(ctx, "scheduler"); return err },
		"VerifyTerm":      func(ctx context.Context) error { return c.VerifyTerm(ctx, pool, "scheduler", 1) },
		"Elector.Run":     el.Run,
		"FollowQueues": func(ctx context.Context) error {
			return c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil })
		},
		"FollowQueues WithAfterEvent": func(ctx context.Context) error {
			return c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, sentinel.WithAfterEvent(3))
		},
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := call(ctx)
			require.ErrorIs(t, err, sentinel.ErrNotMigrated, "%s returned %v", name, err)
			require.False(t, errors.Is(err, context.DeadlineExceeded), "%s waited for its ctx: %v", name, err)
			require.Less(t, time.Since(start), 5*time.Second, "%s did not return promptly", name)
			require.Contains(t, err.Error(), "Migrate")
		})
	}
}

// A schema migrated by an older release (here: to version 10, before
// lease_release) reports ErrNotMigrated from a Release that needs a later
// migration's function, not PostgreSQL's "function does not exist"; after
// Migrate the same lease releases.
func TestReleaseOnASchemaBehindTheCodeReportsNotMigrated(t *testing.T) {
	c := clientOnSchemaAt(t, 10)
	ctx := ctxT(t)
	l, err := c.Lease(ctx, "k")
	require.NoError(t, err, "acquiring needs nothing of migration 11")
	err = l.Release(ctx)
	require.ErrorIs(t, err, sentinel.ErrNotMigrated)
	require.Contains(t, err.Error(), "Migrate")

	require.NoError(t, c.Migrate(ctx))
	l, err = c.Lease(ctx, "k2")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// clientOnSchemaAt returns a client on a schema of its own migrated only
// up to version, as an older release would have left it.
func clientOnSchemaAt(t *testing.T, version int) *sentinel.Client {
	t.Helper()
	e := &env{t: t, schema: "behind_" + uuid.NewString()[:8], stmts: &counter{}}
	pool := e.pool(nil)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+e.schema+`" CASCADE`)
	})
	for _, m := range sentinel.Migrations(e.schema)[:version] {
		_, err := pool.Exec(ctxT(t), m.SQL)
		require.NoError(t, err, m.Name)
	}
	return e.clientOn(pool, &sentinel.Config{DefaultTTL: 10 * time.Second})
}
