package sentinel_test

import (
	"testing"
	"time"

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
