package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/netfault"
)

// Hand-off wake-ups (issue 20): queue events and election resignations
// send NOTIFY only while a follower is registered, and a follower
// registers on the row the notifying statements lock. This scenario races
// registrations against hand-offs under randomised timing and checks that
// no follower ever misses its wake-up:
//
//   - queue: each round a follower of a new namespace starts, through a
//     proxy adding random latency, while a second turn is drawn behind a
//     held one at a random offset; the draw is then the newest event and
//     only it can wake the follower, which must deliver it within
//     handoffBound before the turns are handed over and released. In half the rounds an
//     outside transaction holds the resource's queue row for a while, so
//     the draw takes its snapshot long before the follower registers and
//     commits after it read the history (the ordering the followers row
//     lock must settle).
//     Violation: the follower delivers an event later than
//     handoffBound after it was recorded.
//   - election: each round one to three followers of a new group start
//     while its leader resigns at a random offset. Violation: no follower
//     is elected within handoffBound of the resignation.
//
// Config.WaitRecheck is a minute and the election TTL half a minute: a
// missed wake-up shows as a delay of tens of seconds, a wake-up as
// milliseconds.
const handoffBound = 3 * time.Second

func TestHandoffWakeUps(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 20*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	px, err := netfault.Listen(fmt.Sprintf("127.0.0.1:%d", cl.Port()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	slowURL := fmt.Sprintf("postgres://postgres@%s/sentinel?sslmode=disable", px.Addr())

	cfg := sentinel.Config{DefaultTTL: 30 * time.Second, WaitRecheck: time.Minute}
	holder := newClient(t, newPool(t, cl.URL(), nil), cfg)
	follower := newClient(t, newPool(t, slowURL, nil), cfg)
	var v violations

	// Queue followers.
	var slowestQ time.Duration
	blocked := 0
	for i := range p.HandoffRounds {
		px.SetLatency(time.Duration(rand.IntN(3000)) * time.Microsecond)
		d, b := queueHandoffRound(ctx, t, admin, holder, follower, fmt.Sprintf("q%d", i), &v)
		slowestQ = max(slowestQ, d)
		if b {
			blocked++
		}
	}

	// Election followers.
	var slowestE time.Duration
	followers := 0
	electorClients := []*sentinel.Client{follower,
		newClient(t, newPool(t, slowURL, nil), cfg), newClient(t, newPool(t, cl.URL(), nil), cfg)}
	for i := range p.HandoffRounds {
		px.SetLatency(time.Duration(rand.IntN(3000)) * time.Microsecond)
		n := 1 + rand.IntN(len(electorClients))
		followers += n
		slowestE = max(slowestE, electionHandoffRound(ctx, t, holder, electorClients[:n], fmt.Sprintf("g%d", i), &v))
	}
	px.SetLatency(0)

	report(t, "handoff-wakeups", map[string]any{
		"queue_rounds": p.HandoffRounds, "queue_rounds_with_blocked_draw": blocked,
		"queue_slowest_ms": slowestQ.Milliseconds(),
		"election_rounds":  p.HandoffRounds, "election_followers": followers,
		"election_slowest_ms": slowestE.Milliseconds(),
		"bound_ms":            handoffBound.Milliseconds(), "violations": v.count(),
	})
	v.require(t)
}

// queueHandoffRound: see TestHandoffWakeUps. It returns the longest
// time from an event's recording (QueueEvent.At, the database clock on this
// machine) to its delivery, and whether a draw was held up.
func queueHandoffRound(ctx context.Context, t *testing.T, admin *pgxpool.Pool, holder, follower *sentinel.Client,
	ns string, v *violations) (time.Duration, bool) {
	t.Helper()
	ns = "handoff-" + ns
	// The first turn is held while the second is drawn, so the second's
	// serving checks record nothing: its draw is the last event for a
	// while, and only it can wake the follower.
	first, err := holder.Turn(ctx, "r", sentinel.WithNamespace(ns))
	require.NoError(t, err)

	var mu sync.Mutex
	var slowest time.Duration
	delivered := 0
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	drawn := make(chan struct{}) // the second draw reached the follower
	start := func() {
		go func() {
			defer close(done)
			_ = follower.FollowQueues(fctx, nil, func(ev sentinel.QueueEvent) error {
				d := time.Since(ev.At)
				if ev.Type == sentinel.QueueAssigned && ev.Ticket != first.Ticket() {
					close(drawn)
				}
				mu.Lock()
				delivered++
				slowest = max(slowest, d)
				mu.Unlock()
				if d > handoffBound {
					v.add("%s: %s reached the follower %s after it was recorded", ns, ev, d)
				}
				return nil
			}, sentinel.WithNamespace(ns), sentinel.WithAfterEvent(0))
		}()
	}
	defer func() { cancel(); <-done }()

	// Half the rounds: an outside transaction holds the queue's row, so
	// the second draw takes its snapshot, then waits, while the follower
	// registers and reads the history.
	block := rand.IntN(2) == 0
	var tx pgx.Tx
	if block {
		tx, err = admin.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(ctx, "SELECT 1 FROM sentinel.queues WHERE namespace = $1 AND resource = 'r' FOR UPDATE", ns)
		require.NoError(t, err)
	}
	followerFirst := rand.IntN(2) == 0
	if followerFirst {
		start()
	}
	second := make(chan error, 1)
	go func() {
		tn, err := holder.Turn(ctx, "r", sentinel.WithNamespace(ns))
		if err == nil {
			err = tn.Release(ctx)
		}
		second <- err
	}()
	time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
	if !followerFirst {
		start()
	}
	if block {
		time.Sleep(time.Duration(rand.IntN(20000)) * time.Microsecond)
		require.NoError(t, tx.Commit(ctx))
	}
	// The second draw is the newest event: it alone must wake the
	// follower (nothing else will before the bound). Then hand over:
	// first's leave, second's serve and leave.
	select {
	case <-drawn:
	case <-time.After(handoffBound):
		v.add("%s: the second draw did not reach the follower within %s", ns, handoffBound)
	}
	time.Sleep(rand.N(20 * time.Millisecond))
	require.NoError(t, first.Release(ctx))
	require.NoError(t, <-second)
	const events = 6 // two turns: assigned, granted, completed
	deadline := time.Now().Add(handoffBound + time.Second)
	for {
		mu.Lock()
		n := delivered
		mu.Unlock()
		if n >= events {
			break
		}
		if time.Now().After(deadline) {
			v.add("%s: the follower got %d of %d events", ns, n, events)
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	return slowest, block
}

// electionHandoffRound: see TestHandoffWakeUps. It returns how long after
// the resignation a follower was elected.
func electionHandoffRound(ctx context.Context, t *testing.T, leader *sentinel.Client, followers []*sentinel.Client,
	group string, v *violations) time.Duration {
	t.Helper()
	group = "handoff-" + group
	elected := make(chan time.Time, len(followers)+1)
	run := func(c *sentinel.Client) (*sentinel.Elector, func()) {
		el, err := c.Elector(group, sentinel.ElectorOptions{TTL: 30 * time.Second, OnElected: func(ctx context.Context, _ int64) {
			elected <- time.Now()
			<-ctx.Done()
		}})
		require.NoError(t, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = el.Run(rctx) }()
		return el, func() { cancel(); <-done }
	}
	el, stopLeader := run(leader)
	defer stopLeader()
	select {
	case <-elected:
	case <-time.After(30 * time.Second):
		v.add("%s: the first elector was not elected", group)
		return 0
	}
	for _, c := range followers {
		_, stop := run(c)
		defer stop()
	}
	time.Sleep(time.Duration(rand.IntN(10000)) * time.Microsecond)
	resigned := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	require.NoError(t, el.Resign(rctx))
	cancel()
	select {
	case at := <-elected:
		d := at.Sub(resigned)
		if d > handoffBound {
			v.add("%s: a follower was elected %s after the resignation", group, d)
		}
		return d
	case <-time.After(handoffBound + time.Second):
		v.add("%s: no follower was elected within %s of the resignation", group, handoffBound)
		return handoffBound
	}
}
