package sentinel_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func eventTypes(evs []sentinel.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// History with WithLimit returns the key's newest events, oldest first,
// and bad limits or calls that do not take it are refused writing nothing.
func TestHistoryWithLimitReturnsTheNewest(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for range 3 {
		_, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 0, sentinel.Retryable(errors.New("later")) })
		require.Error(t, err)
	}
	_, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	all, err := c.History(ctx, "k")
	require.NoError(t, err)
	require.Greater(t, len(all), 8)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].ID, all[i].ID, "oldest first")
	}
	for _, n := range []int{1, 4, len(all) - 1, len(all), len(all) + 10} {
		got, err := c.History(ctx, "k", sentinel.WithLimit(n))
		require.NoError(t, err)
		require.Equal(t, all[max(0, len(all)-n):], got, "WithLimit(%d)", n)
	}

	before := e.count("events", "")
	for _, n := range []int{0, -1} {
		_, err := c.History(ctx, "k", sentinel.WithLimit(n))
		require.ErrorIs(t, err, sentinel.ErrInvalid, "WithLimit(%d)", n)
	}
	_, err = c.History(ctx, "k", sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	lim := sentinel.WithLimit(5)
	_, err = sentinel.Once(ctx, c, "other", func(context.Context) (int, error) { return 1, nil }, lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Lease(ctx, "other", lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Inspect(ctx, "k", lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.LastRun(ctx, "k", lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Prune(ctx, time.Hour, lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Turn(ctx, "r", lim)
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	for _, opt := range []sentinel.Option{lim, sentinel.WithRerun(2), sentinel.WithLabel("l"), sentinel.WithAfterEvent(1)} {
		require.ErrorIs(t, sentinel.RegisterResultType[int](ctx, c, "other-", opt), sentinel.ErrInvalid)
	}
	require.Equal(t, before, e.count("events", ""), "a refused call writes nothing")
	require.Equal(t, 0, e.count("executions", "key = 'other'"))
}

// A limited read costs its limit on the server, however long the key's
// history: the limit is the statement's, not the client's.
func TestHistoryWithLimitReadsOnlyTheLimit(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "long", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "INSERT INTO "+e.table("events")+" (namespace, key, event, state, token, owner)"+
		" SELECT 'default', 'long', 'replayed', 'completed', 1, 'x' FROM pg_catalog.generate_series(1, 20000)")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ANALYZE "+e.table("events"))
	require.NoError(t, err)

	most, raw := mostRowsRead(t, ctx, sentinel.HistorySQL(c), "default", "long", int64(10))
	require.LessOrEqual(t, most, 10.0, "a node of the plan read more rows than the limit: %s", raw)

	got, err := c.History(ctx, "long", sentinel.WithLimit(10))
	require.NoError(t, err)
	require.Len(t, got, 10)
	require.Equal(t, "replayed", got[9].Type)

	// LastRun reads from the newest claim on, not the runs before it
	// (6,000 of them, three events each).
	_, err = admin.Exec(ctx, "INSERT INTO "+e.table("events")+" (namespace, key, event, state, token, owner)"+
		" SELECT 'default', 'runs', (ARRAY['claimed', 'started', 'retryable'])[i % 3 + 1], 'claimed', i / 3, 'x'"+
		" FROM pg_catalog.generate_series(0, 17999) AS i")
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, c, "runs", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "ANALYZE "+e.table("events"))
	require.NoError(t, err)
	most, raw = mostRowsRead(t, ctx, sentinel.LastRunSQL(c), "default", "runs")
	require.LessOrEqual(t, most, 10.0, "a node of the plan read rows of earlier runs: %s", raw)
	run, err := c.LastRun(ctx, "runs")
	require.NoError(t, err)
	require.Equal(t, []string{"claimed", "started", "completed"}, eventTypes(run))
}

// mostRowsRead runs sql under EXPLAIN ANALYZE and returns the most rows any
// node of its plan returned or filtered out, and the plan.
func mostRowsRead(t *testing.T, ctx context.Context, sql string, args ...any) (float64, []byte) {
	t.Helper()
	var plan []map[string]any
	var raw []byte
	require.NoError(t, admin.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &plan))
	most := 0.0
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		for _, f := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			if r, ok := n[f].(float64); ok {
				most = max(most, r)
			}
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	return most, raw
}

// LastRun returns the key's latest run (its newest claimed event and what
// followed), without the records of callers turned away: the evidence an
// operator resolves with stays in it when rejections have pushed it out of
// the newest events, and an earlier run is not in it.
func TestLastRunKeepsTheEvidenceAndLeavesOutRejections(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{RecordRejections: true})
	type receipt struct {
		ID string `json:"id"`
	}
	_, err := sentinel.Once(ctx, c, "pay", func(context.Context) (receipt, error) {
		return receipt{}, sentinel.Retryable(errors.New("gateway busy"))
	})
	require.Error(t, err)
	_, err = sentinel.Once(ctx, c, "pay", func(ctx context.Context) (receipt, error) {
		started := time.Now()
		<-ctx.Done() // the hard TTL ends the lease
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return receipt{"ch_1"}, nil
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	for range 5 {
		_, err = sentinel.Once(ctx, c, "pay", func(context.Context) (receipt, error) { return receipt{"again"}, nil })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}

	all, err := c.History(ctx, "pay")
	require.NoError(t, err)
	newest, err := c.History(ctx, "pay", sentinel.WithLimit(5))
	require.NoError(t, err)
	require.Equal(t, []string{"rejected", "rejected", "rejected", "rejected", "rejected"}, eventTypes(newest))

	run, err := c.LastRun(ctx, "pay")
	require.NoError(t, err)
	require.Equal(t, []string{"claimed", "started", "completion_refused"}, eventTypes(run), "history: %v", eventTypes(all))
	require.Equal(t, run[0].Token, run[2].Token)
	var firstClaim int64
	for _, ev := range all {
		if ev.Type == "claimed" {
			firstClaim = ev.ID
			break
		}
	}
	require.Less(t, firstClaim, run[0].ID, "the earlier run is not in it")
	raw, err := json.Marshal(run[2].Metadata["result"])
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"ch_1"}`, string(raw))

	// The operator's steps since join the run.
	_, err = c.Reconcile(ctx, "pay")
	require.NoError(t, err)
	run, err = c.LastRun(ctx, "pay")
	require.NoError(t, err)
	require.Equal(t, []string{"claimed", "started", "completion_refused", "reconciling"}, eventTypes(run))

	// With its claims pruned, the rest of the history (rejections left out).
	_, err = admin.Exec(ctx, "DELETE FROM "+e.table("events")+" WHERE event = 'claimed'")
	require.NoError(t, err)
	run, err = c.LastRun(ctx, "pay")
	require.NoError(t, err)
	require.NotContains(t, eventTypes(run), "rejected")
	require.Contains(t, eventTypes(run), "completion_refused")
	require.Equal(t, "reconciling", run[len(run)-1].Type)

	run, err = c.LastRun(ctx, "never-ran")
	require.NoError(t, err)
	require.Empty(t, run)
	_, err = c.LastRun(ctx, "")
	require.ErrorIs(t, err, sentinel.ErrInvalid)
}
