package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// seedUncertain leaves key executing with an expired lease: fn fails, which
// ends the lease at once (the outcome is unknown).
func seedUncertain(t *testing.T, c *sentinel.Client, key string, opts ...sentinel.Option) {
	t.Helper()
	_, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (int, error) {
		return 0, errors.New("boom")
	}, opts...)
	require.Error(t, err)
}

func TestExecutionsFilters(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)

	for i := range 3 {
		_, err := sentinel.Once(ctx, c, fmt.Sprintf("done-%d", i), func(context.Context) (int, error) { return i, nil })
		require.NoError(t, err)
	}
	seedUncertain(t, c, "unc-1")
	seedUncertain(t, c, "unc-2")
	seedUncertain(t, c, "other-ns", sentinel.WithNamespace("billing"))
	// A live execution: executing, lease alive, not uncertain.
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, c, "live", func(context.Context) (int, error) {
			close(entered)
			<-release
			return 1, nil
		}, sentinel.WithTTL(5*time.Second))
		done <- err
	}()
	<-entered
	defer func() { close(release); require.NoError(t, <-done) }()

	keys := func(f sentinel.ExecutionFilter) []string {
		t.Helper()
		ex, next, err := c.Executions(ctx, f)
		require.NoError(t, err)
		require.Empty(t, next)
		var out []string
		for _, x := range ex {
			out = append(out, x.Namespace+"/"+x.Key)
		}
		return out
	}
	require.Equal(t, []string{"default/done-0", "default/done-1", "default/done-2", "default/unc-1", "default/unc-2", "default/live"},
		keys(sentinel.ExecutionFilter{}))
	require.Equal(t, []string{"default/unc-1", "default/unc-2"}, keys(sentinel.ExecutionFilter{Uncertain: true}))
	require.Equal(t, []string{"default/unc-1", "default/unc-2"}, keys(sentinel.ExecutionFilter{Uncertain: true, State: sentinel.StateExecuting}))
	require.Equal(t, []string{"default/unc-1", "default/unc-2", "default/live"}, keys(sentinel.ExecutionFilter{State: sentinel.StateExecuting}))
	require.Equal(t, []string{"default/done-0", "default/done-1", "default/done-2"}, keys(sentinel.ExecutionFilter{State: sentinel.StateCompleted}))
	require.Equal(t, []string{"billing/other-ns"}, keys(sentinel.ExecutionFilter{Namespace: "billing"}))
	require.Equal(t, []string{"default/unc-1", "default/unc-2", "billing/other-ns"}, keys(sentinel.ExecutionFilter{Uncertain: true, AllNamespaces: true}))
	require.Empty(t, keys(sentinel.ExecutionFilter{Namespace: "nobody"}))
	require.Equal(t, []string{"default/unc-1", "default/unc-2"}, keys(sentinel.ExecutionFilter{KeyPrefix: "unc-"}))
	require.Equal(t, []string{"default/done-1"}, keys(sentinel.ExecutionFilter{KeyPrefix: "done-1", State: sentinel.StateCompleted}))
	require.Equal(t, []string{"billing/other-ns"}, keys(sentinel.ExecutionFilter{KeyPrefix: "oth", AllNamespaces: true}))
	require.Empty(t, keys(sentinel.ExecutionFilter{KeyPrefix: "unc-%"}), "a prefix, not a pattern")

	// Time bounds: UpdatedAt of the uncertain keys.
	u1, err := c.Inspect(ctx, "unc-1")
	require.NoError(t, err)
	u2, err := c.Inspect(ctx, "unc-2")
	require.NoError(t, err)
	require.Equal(t, []string{"default/unc-2"}, keys(sentinel.ExecutionFilter{Uncertain: true, UpdatedAfter: u1.UpdatedAt}))
	require.Equal(t, []string{"default/unc-1"}, keys(sentinel.ExecutionFilter{Uncertain: true, UpdatedBefore: u2.UpdatedAt}))
	require.Empty(t, keys(sentinel.ExecutionFilter{Uncertain: true, UpdatedAfter: u1.UpdatedAt, UpdatedBefore: u2.UpdatedAt}))

	// The rows carry what an operator needs.
	ex, _, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, ex, 1)
	require.Equal(t, u1.Token, ex[0].Token)
	require.Equal(t, c.Owner(), ex[0].Owner)
	require.False(t, ex[0].LeaseAlive)
	require.NotEmpty(t, ex[0].Host)
}

func TestExecutionsPaging(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	// Many keys changing state in the same microsecond would tie on
	// UpdatedAt; the order then falls back to namespace and key. Force
	// ties by writing one timestamp for all.
	const n = 23
	for i := range n {
		seedUncertain(t, c, fmt.Sprintf("k%02d", i))
	}
	_, err := admin.Exec(ctx, "UPDATE "+e.table("executions")+" SET updated_at = '2026-01-01T00:00:00Z' WHERE key < 'k10'")
	require.NoError(t, err)

	for _, all := range []bool{false, true} {
		var got []string
		cursor := ""
		pages := 0
		for {
			ex, next, err := c.Executions(ctx, sentinel.ExecutionFilter{Uncertain: true, AllNamespaces: all, Limit: 5, After: cursor})
			require.NoError(t, err)
			pages++
			require.LessOrEqual(t, len(ex), 5)
			for _, x := range ex {
				got = append(got, x.Key)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		require.Equal(t, 5, pages)
		require.Len(t, got, n)
		for i := range n {
			require.Equal(t, fmt.Sprintf("k%02d", i), got[i], "all=%v", all)
		}
	}

	// An exact multiple of the page size ends with an empty cursor on the
	// page that holds the last row.
	ex, next, err := c.Executions(ctx, sentinel.ExecutionFilter{Limit: n})
	require.NoError(t, err)
	require.Len(t, ex, n)
	require.Empty(t, next)
}

func TestExecutionsInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	now := time.Now()
	_, good, err := c.Executions(ctx, sentinel.ExecutionFilter{Limit: 1})
	require.NoError(t, err)
	require.Empty(t, good)
	seedUncertain(t, c, "a")
	seedUncertain(t, c, "b")
	_, cur, err := c.Executions(ctx, sentinel.ExecutionFilter{Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, cur)

	for name, f := range map[string]sentinel.ExecutionFilter{
		"unknown state":           {State: "done"},
		"uncertain and completed": {Uncertain: true, State: sentinel.StateCompleted},
		"namespace and all":       {Namespace: "x", AllNamespaces: true},
		"bad namespace":           {Namespace: "a\x00b"},
		"negative limit":          {Limit: -1},
		"limit too large":         {Limit: sentinel.MaxExecutionsLimit + 1},
		"empty range":             {UpdatedAfter: now, UpdatedBefore: now},
		"garbage cursor":          {After: "not a cursor"},
		"base64 non-json cursor":  {After: "aGVsbG8"},
		"cursor of another ns":    {After: cur, Namespace: "elsewhere"},
		"key prefix with NUL":     {KeyPrefix: "a\x00"},
		"key prefix too long":     {KeyPrefix: strings.Repeat("k", sentinel.MaxKeyLen+1)},
	} {
		_, _, err := c.Executions(ctx, f)
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
		var ie *sentinel.InvalidError
		require.ErrorAs(t, err, &ie, name)
	}
	c.Close()
	_, _, err = c.Executions(ctx, sentinel.ExecutionFilter{})
	require.ErrorIs(t, err, sentinel.ErrClosed)
}

// The operator's listing uses the partial index on open executions, not a
// scan of the completed ones.
func TestExecutionsUsesOpenIndex(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, `INSERT INTO `+e.table("executions")+` (namespace, key, state, owner, token, created_at, updated_at, completed_at)
		SELECT 'default', 'k'||g, 'completed', 'o', g, now(), now(), now() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ANALYZE "+e.table("executions"))
	require.NoError(t, err)
	rows, err := admin.Query(ctx, `EXPLAIN (FORMAT TEXT) SELECT t.key FROM `+e.table("executions")+` t
		WHERE t.namespace = 'default' AND t.state = 'executing' AND t.state <> 'completed'
		AND t.lease_expires_at <= pg_catalog.clock_timestamp() ORDER BY t.updated_at, t.namespace, t.key LIMIT 101`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, strings.Join(lines, "\n"), "executions_open_idx")
}
