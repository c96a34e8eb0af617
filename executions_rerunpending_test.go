package sentinel_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// ExecutionFilter.RerunPending lists the keys status --exit-code pages on
// as rerun pending (executing, lease expired on the database clock,
// attempts left: Execution.Rerunnable) and nothing else: not the uncertain
// ones (no attempt left, or no WithRerun), not a live executing key, not a
// completed one. It pages, and takes KeyPrefix and the namespaces, as
// Uncertain does.
func TestExecutionsRerunPending(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)

	_, err := sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	seedUncertain(t, c, "rp-1", sentinel.WithRerun(3)) // attempt 1 of 3 failed: rerun pending
	seedUncertain(t, c, "unc-plain")                   // no WithRerun: uncertain
	seedUncertain(t, c, "unc-spent", sentinel.WithRerun(2))
	seedUncertain(t, c, "unc-spent", sentinel.WithRerun(2)) // attempt 2 of 2 failed: uncertain
	seedUncertain(t, c, "rp-2", sentinel.WithRerun(3))
	seedUncertain(t, c, "rp-2", sentinel.WithRerun(3)) // attempt 2 of 3 failed: still rerun pending
	seedUncertain(t, c, "rp-billing", sentinel.WithRerun(3), sentinel.WithNamespace("billing"))
	// A live execution, run WithRerun: executing, lease alive, attempts
	// left, but its worker is running it.
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, c, "rp-live", func(context.Context) (int, error) {
			close(entered)
			<-release
			return 1, nil
		}, sentinel.WithTTL(5*time.Second), sentinel.WithRerun(3))
		done <- err
	}()
	<-entered
	defer func() { close(release); require.NoError(t, <-done) }()

	list := func(f sentinel.ExecutionFilter) ([]sentinel.Execution, []string) {
		t.Helper()
		ex, next, err := c.Executions(ctx, f)
		require.NoError(t, err)
		require.Empty(t, next)
		var out []string
		for _, x := range ex {
			out = append(out, x.Namespace+"/"+x.Key)
		}
		return ex, out
	}
	keys := func(f sentinel.ExecutionFilter) []string { t.Helper(); _, k := list(f); return k }

	ex, got := list(sentinel.ExecutionFilter{RerunPending: true})
	require.Equal(t, []string{"default/rp-1", "default/rp-2"}, got)
	for _, x := range ex {
		require.True(t, x.Rerunnable(), "%s: Execution.Rerunnable agrees", x.Key)
		require.False(t, x.LeaseAlive)
	}
	require.Equal(t, 1, ex[0].Attempt)
	require.Equal(t, 2, ex[1].Attempt)
	require.Equal(t, 3, ex[1].MaxAttempts)
	require.Equal(t, got, keys(sentinel.ExecutionFilter{RerunPending: true, State: sentinel.StateExecuting}))
	require.Equal(t, []string{"default/unc-plain", "default/unc-spent"}, keys(sentinel.ExecutionFilter{Uncertain: true}),
		"the complement among the expired executing keys")
	require.Equal(t, []string{"default/rp-1", "default/rp-2", "billing/rp-billing"}, keys(sentinel.ExecutionFilter{RerunPending: true, AllNamespaces: true}))
	require.Equal(t, []string{"billing/rp-billing"}, keys(sentinel.ExecutionFilter{RerunPending: true, Namespace: "billing"}))
	require.Equal(t, []string{"default/rp-2"}, keys(sentinel.ExecutionFilter{RerunPending: true, KeyPrefix: "rp-2"}))
	require.Empty(t, keys(sentinel.ExecutionFilter{RerunPending: true, KeyPrefix: "unc-"}))
	rp2, err := c.Inspect(ctx, "rp-2")
	require.NoError(t, err)
	require.Equal(t, []string{"default/rp-1"}, keys(sentinel.ExecutionFilter{RerunPending: true, UpdatedBefore: rp2.UpdatedAt}))

	// Paging: one row a page, every namespace.
	var paged []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4, "the pages end")
		ex, next, err := c.Executions(ctx, sentinel.ExecutionFilter{RerunPending: true, AllNamespaces: true, Limit: 1, After: cursor})
		require.NoError(t, err)
		for _, x := range ex {
			paged = append(paged, x.Namespace+"/"+x.Key)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"default/rp-1", "default/rp-2", "billing/rp-billing"}, paged)

	// The next caller with WithRerun runs it: it leaves the list.
	_, err = sentinel.Once(ctx, c, "rp-1", func(context.Context) (int, error) { return 2, nil }, sentinel.WithRerun(3))
	require.NoError(t, err)
	require.Equal(t, []string{"default/rp-2"}, keys(sentinel.ExecutionFilter{RerunPending: true}))
}

// RerunPending selects executing executions with a re-run left: with
// another state, with Uncertain (none left) or with ResultLost (completed)
// the filter is refused before anything is read.
func TestExecutionsRerunPendingInvalid(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	// A cancelled ctx: a statement sent would fail with context.Canceled,
	// so ErrInvalid shows nothing was read.
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	for name, f := range map[string]sentinel.ExecutionFilter{
		"completed":            {RerunPending: true, State: sentinel.StateCompleted},
		"claimed":              {RerunPending: true, State: sentinel.StateClaimed},
		"reconciling":          {RerunPending: true, State: sentinel.StateReconciling},
		"uncertain":            {RerunPending: true, Uncertain: true},
		"result lost":          {RerunPending: true, ResultLost: true},
		"uncertain, executing": {RerunPending: true, Uncertain: true, State: sentinel.StateExecuting},
	} {
		ex, next, err := c.Executions(ctx, f)
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
		require.NotErrorIs(t, err, context.Canceled, name)
		var ie *sentinel.InvalidError
		require.ErrorAs(t, err, &ie, name)
		require.Contains(t, fmt.Sprint(err), "RerunPending", name)
		require.Empty(t, ex, name)
		require.Empty(t, next, name)
	}
	// The check of the test itself: a good filter does reach the database.
	_, _, err := c.Executions(ctx, sentinel.ExecutionFilter{RerunPending: true})
	require.ErrorIs(t, err, context.Canceled)
}
