package sentinel_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The observer hears queue grants and election term changes (issue 12,
// item 9: queue wait time, election term changes).
func TestObserverSeesQueueGrantsAndTerms(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var grants []sentinel.QueueGrant
	var terms []sentinel.TermChange
	obs := &sentinel.Observer{
		QueueGranted: func(g sentinel.QueueGrant) { mu.Lock(); grants = append(grants, g); mu.Unlock() },
		TermChanged:  func(tc sentinel.TermChange) { mu.Lock(); terms = append(terms, tc); mu.Unlock() },
	}
	c := e.client(&sentinel.Config{Observer: obs})
	tn, err := c.Turn(ctx, "printer", sentinel.WithLabel("report"))
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
	mu.Lock()
	require.Len(t, grants, 1)
	require.Equal(t, "printer", grants[0].Resource)
	require.Equal(t, tn.Ticket(), grants[0].Ticket)
	require.Equal(t, 0, grants[0].Ahead, "nobody was ahead")
	mu.Unlock()

	// Depth: a ticket drawn behind a holder and a waiter has two ahead.
	plain := e.client(nil)
	holder, err := plain.Turn(ctx, "printer")
	require.NoError(t, err)
	waiting := make(chan *sentinel.Turn, 1)
	go func() {
		w, err := plain.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		waiting <- w
	}()
	waitWaiting(t, plain, "printer", 1)
	third := make(chan *sentinel.Turn, 1)
	go func() {
		w, err := c.Turn(ctx, "printer")
		if err != nil {
			t.Error(err)
		}
		third <- w
	}()
	waitWaiting(t, plain, "printer", 2)
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, (<-waiting).Release(ctx))
	require.NoError(t, (<-third).Release(ctx))
	mu.Lock()
	require.Len(t, grants, 2, "only the observed client reports")
	require.Equal(t, 2, grants[1].Ahead)
	require.Greater(t, grants[1].Wait, time.Duration(0))
	mu.Unlock()

	el, err := c.Elector("scheduler", sentinel.ElectorOptions{TTL: time.Second})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(rctx) }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(terms) == 2
	}, 5*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.True(t, terms[0].Self)
	require.False(t, terms[0].Demoted)
	require.True(t, terms[1].Demoted)
	require.Equal(t, terms[0].Term, terms[1].Term)
}

// A stale term or ticket refused by VerifyTerm or VerifyTurn is a fencing
// refusal, reported like VerifyToken's.
func TestObserverSeesTermAndTurnRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	var refusals []sentinel.FencingRefusal
	c := e.client(&sentinel.Config{Observer: &sentinel.Observer{
		FencingRefused: func(_ context.Context, r sentinel.FencingRefusal) {
			mu.Lock()
			refusals = append(refusals, r)
			mu.Unlock()
		},
	}})
	tn, err := c.Turn(ctx, "printer")
	require.NoError(t, err)
	require.NoError(t, c.VerifyTurn(ctx, admin, "printer", tn.Ticket()))
	require.NoError(t, tn.Release(ctx))
	require.ErrorIs(t, c.VerifyTurn(ctx, admin, "printer", tn.Ticket()), sentinel.ErrStaleToken)
	require.ErrorIs(t, c.VerifyTerm(ctx, admin, "scheduler", 12345), sentinel.ErrStaleToken)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, refusals, 2)
	require.Equal(t, "printer", refusals[0].Key)
	require.Equal(t, tn.Ticket(), refusals[0].Token)
	require.Equal(t, "scheduler", refusals[1].Key)
	require.Equal(t, int64(12345), refusals[1].Token)
}
