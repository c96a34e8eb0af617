package otelsentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// A leader that steps down itself (Resign, Run's ctx ended, Client.Close)
// counts as sentinel.role "resigned"; only a term lost against its will
// (taken over here) or because a callback panicked counts as "demoted", so an alert on demotions does not
// fire at every rolling deploy. Before, all five counted as "demoted".
func TestCleanStepDownIsResigned(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	lead := func(c *sentinel.Client, group string) (*sentinel.Elector, context.CancelFunc, chan error) {
		el, err := c.Elector(group, sentinel.ElectorOptions{TTL: time.Second})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- el.Run(rctx) }()
		require.Eventually(t, el.IsLeader, 10*time.Second, 10*time.Millisecond)
		return el, cancel, done
	}
	c := w.client(nil)

	// Resign
	el, cancel, done := lead(c, "resign")
	require.NoError(t, el.Resign(ctx))
	cancel()
	require.NoError(t, <-done)
	// Run's ctx ended
	_, cancel, done = lead(c, "stop")
	cancel()
	require.NoError(t, <-done)
	// taken over: a real loss
	el, cancel, done = lead(c, "lost")
	_, err := admin.Exec(ctx, "UPDATE "+pgx.Identifier{w.schema, "leaders"}.Sanitize()+
		" SET term = term + 1000, owner = 'intruder' WHERE election = 'lost'")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !el.IsLeader() }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	// a callback panicked: the leader stopped against its will too
	pel, err := c.Elector("panic", sentinel.ElectorOptions{TTL: time.Second,
		OnElected: func(context.Context, int64) { panic("bug") }})
	require.NoError(t, err)
	var cpe *sentinel.CallbackPanicError
	require.ErrorAs(t, pel.Run(ctx), &cpe)
	// Client.Close
	_, cancel, done = lead(c, "close")
	defer cancel()
	c.Close()
	require.ErrorIs(t, <-done, sentinel.ErrClosed)

	got := sumBy2(t, w.metrics()["sentinel.election.term_changes"], otelsentinel.AttrGroup, otelsentinel.AttrRole)
	for _, g := range []string{"resign", "stop", "close"} {
		require.EqualValues(t, 1, got[g+"/resigned"], "%s: %v", g, got)
		require.Zero(t, got[g+"/demoted"], "%s: %v", g, got)
	}
	for _, g := range []string{"lost", "panic"} {
		require.EqualValues(t, 1, got[g+"/demoted"], "%s: %v", g, got)
		require.Zero(t, got[g+"/resigned"], "%s: %v", g, got)
	}
}
