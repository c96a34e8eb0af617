package sentinel_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// followAll runs FollowQueues on c until the test ends and returns the events
// it delivers.
func followAll(t *testing.T, c *sentinel.Client, opts ...sentinel.Option) <-chan sentinel.QueueEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan sentinel.QueueEvent, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.FollowQueues(ctx, nil, func(ev sentinel.QueueEvent) error {
			out <- ev
			return nil
		}, opts...)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return out
}

// payloads returns the notifications of one kind (their first byte: 'q'
// queue events, 'g' election groups) among notes within d.
func payloads(notes <-chan string, kind string, d time.Duration) []string {
	var got []string
	deadline := time.After(d)
	for {
		select {
		case p := <-notes:
			if strings.HasPrefix(p, kind) {
				got = append(got, p)
			}
		case <-deadline:
			return got
		}
	}
}

func queuePayloads(notes <-chan string, d time.Duration) []string { return payloads(notes, "q", d) }

// deadTicket leaves a dead ticket on resource (its client stopped
// renewing it) for ResetQueue to remove.
func deadTicket(t *testing.T, e *env, resource string) {
	t.Helper()
	c := e.client(&sentinel.Config{DefaultTTL: time.Minute})
	_, err := c.Turn(ctxT(t), resource)
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), "UPDATE "+e.table("tickets")+
		" SET expires_at = clock_timestamp() - interval '1 second' WHERE resource = $1", resource)
	require.NoError(t, err)
}

// Issue 20: queue events (draw, serve, leave, reset) send NOTIFY only while
// a follower of the namespace is registered, and a registration expires.
func TestQueueEventsNotifyOnlyWhenFollowed(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	notes := notifications(t, e)
	a := e.client(&sentinel.Config{DefaultTTL: time.Minute})

	// Nobody follows: draw, serve, release and reset send nothing.
	turn, err := a.Turn(ctx, "quiet")
	require.NoError(t, err)
	require.NoError(t, turn.Release(ctx))
	deadTicket(t, e, "dead")
	n, err := a.ResetQueue(ctx, "dead")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, queuePayloads(notes, 300*time.Millisecond), "queue events with no follower")
	require.Equal(t, 6, e.count("queue_events", "resource IN ('quiet', 'dead')"), "the events were recorded")

	// A follower registers; every event notifies it (and it gets them).
	f := e.client(&sentinel.Config{WaitRecheck: time.Minute})
	evs := followAll(t, f)
	require.Eventually(t, func() bool {
		return e.count("queue_followers", "namespace = 'default' AND following_until > clock_timestamp() + interval '1 minute'") == 1
	}, 10*time.Second, 5*time.Millisecond, "the follower registers")
	start := time.Now()
	turn, err = a.Turn(ctx, "watched")
	require.NoError(t, err)
	require.NoError(t, turn.Release(ctx))
	deadTicket(t, e, "dead")
	_, err = a.ResetQueue(ctx, "dead")
	require.NoError(t, err)
	got := queuePayloads(notes, 500*time.Millisecond)
	// assigned+granted+completed on watched, assigned on dead (its serve is
	// the same statement's draw when nobody is ahead: granted too), reset.
	require.GreaterOrEqual(t, len(got), 4, "every event statement notifies a registered follower: %q", got)
	for _, p := range got {
		require.Equal(t, "q"+fmt.Sprint(len("default"))+":default", p)
	}
	var types []string
	for len(types) < 6 {
		select {
		case ev := <-evs:
			types = append(types, ev.Resource+" "+ev.Type)
		case <-time.After(5 * time.Second):
			t.Fatalf("the follower got %q only", types)
		}
	}
	require.Less(t, time.Since(start), 5*time.Second, "woken, not the WaitRecheck re-read")
	require.Equal(t, []string{"watched assigned", "watched granted", "watched completed", "dead assigned", "dead granted", "dead crashed"}, types)

	// Another namespace's follower does not make this one's events notify.
	_, err = admin.Exec(ctx, "UPDATE "+e.table("queue_followers")+" SET following_until = clock_timestamp() - interval '1 second'")
	require.NoError(t, err) // as if the follower had stopped and its registration expired
	turn, err = a.Turn(ctx, "expired")
	require.NoError(t, err)
	require.NoError(t, turn.Release(ctx))
	require.Empty(t, queuePayloads(notes, 300*time.Millisecond), "events after the registration expired")
}

// Followers registering while queue events are recorded: whichever comes
// first, every event reaches the follower promptly (a notification, or the
// read that follows its registration), never only at the WaitRecheck
// re-read, which is a minute here. Each round uses a new namespace, so its
// follower's registration is a new one racing the turn's statements.
func TestFollowQueuesNeverMissesAnEvent(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: time.Minute}
	holder, follower := e.client(cfg), e.client(cfg)
	const rounds, parallel = 40, 4
	slowest := raceRounds(parallel, rounds, func(p, i int, r *rand.Rand) (time.Duration, bool) {
		ns := fmt.Sprintf("race-%d-%d", p, i)
		fctx, cancel := context.WithCancel(ctx)
		completed := make(chan time.Time, 1)
		done := make(chan error, 1)
		go func() {
			done <- follower.FollowQueues(fctx, nil, func(ev sentinel.QueueEvent) error {
				if ev.Type == sentinel.QueueCompleted {
					completed <- time.Now()
				}
				return nil
			}, sentinel.WithNamespace(ns), sentinel.WithAfterEvent(0))
		}()
		// The turn anywhere from before the follower's first
		// read to well after it registered.
		time.Sleep(time.Duration(r.IntN(6000)) * time.Microsecond)
		turn, err := holder.Turn(ctx, "r", sentinel.WithNamespace(ns))
		if err != nil {
			t.Error(err)
			cancel()
			return 0, false
		}
		released := time.Now()
		if err := turn.Release(ctx); err != nil {
			t.Error(err)
			cancel()
			return 0, false
		}
		var d time.Duration
		select {
		case at := <-completed:
			d = at.Sub(released)
		case <-time.After(20 * time.Second):
			t.Errorf("round %d/%d: the follower missed the events", p, i)
			cancel()
			<-done
			return 0, false
		}
		cancel()
		<-done
		return d, true
	})
	t.Logf("slowest delivery after release: %s", slowest)
	require.Less(t, slowest, 5*time.Second, "a wake-up or the read after registering, never the re-read")
}

// electUntil runs an elector of group on c until the test ends; elected
// receives its terms.
func electUntil(t *testing.T, c *sentinel.Client, group string, ttl time.Duration) (*sentinel.Elector, <-chan time.Time, func()) {
	t.Helper()
	elected := make(chan time.Time, 10)
	el, err := c.Elector(group, sentinel.ElectorOptions{TTL: ttl, OnElected: func(ctx context.Context, _ int64) {
		elected <- time.Now()
		<-ctx.Done()
	}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := el.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return el, elected, stop
}

func groupPayloads(notes <-chan string, d time.Duration) []string { return payloads(notes, "g", d) }

// Issue 20: a resignation sends NOTIFY only while another elector of the
// group waits for the hand-off, and a registration expires.
func TestResignNotifiesOnlyWhenSomeoneWaits(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	notes := notifications(t, e)
	cfg := &sentinel.Config{WaitRecheck: time.Minute}
	a, b := e.client(cfg), e.client(cfg)
	const ttl = 30 * time.Second

	// Alone: its resignation wakes nobody and notifies nobody.
	ea, electedA, _ := electUntil(t, a, "solo", ttl)
	<-electedA
	require.NoError(t, ea.Resign(ctx))
	require.Empty(t, groupPayloads(notes, 300*time.Millisecond), "resignation with nobody waiting")

	// A follower waits: the resignation notifies it and it takes over at
	// once, long before the TTL.
	ea2, electedA2, _ := electUntil(t, a, "pair", ttl)
	<-electedA2
	_, electedB, stopB := electUntil(t, b, "pair", ttl)
	require.Eventually(t, func() bool {
		return e.count("leaders", "election = 'pair' AND waiting_until > clock_timestamp()") == 1
	}, 10*time.Second, 5*time.Millisecond, "the follower registers as waiting")
	resigned := time.Now()
	require.NoError(t, ea2.Resign(ctx))
	require.Equal(t, []string{"g" + fmt.Sprint(len("default")) + ":defaultpair"}, groupPayloads(notes, 300*time.Millisecond))
	select {
	case at := <-electedB:
		require.Less(t, at.Sub(resigned), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the follower was not elected after the resignation")
	}

	// A follower that stopped leaves its registration behind: that only
	// costs NOTIFYs until it expires (one TTL past the term it was made
	// under); once it has, a resignation notifies nobody again. (Stopping
	// b resigns its "pair" term, which a, still following, is woken for.)
	stopB()
	ea3, electedA3, _ := electUntil(t, a, "expired", ttl)
	<-electedA3
	_, _, stopB3 := electUntil(t, b, "expired", ttl)
	require.Eventually(t, func() bool {
		return e.count("leaders", "election = 'expired' AND waiting_until > clock_timestamp()") == 1
	}, 10*time.Second, 5*time.Millisecond, "the follower registers as waiting")
	stopB3()
	_, err := admin.Exec(ctx, "UPDATE "+e.table("leaders")+" SET waiting_until = clock_timestamp() - interval '1 second' WHERE election = 'expired'")
	require.NoError(t, err) // as if the registration had expired
	require.NoError(t, ea3.Resign(ctx))
	require.NotContains(t, groupPayloads(notes, 300*time.Millisecond), "g"+fmt.Sprint(len("default"))+":defaultexpired",
		"resignation after the registration expired")
}

// Followers registering as waiting while the leader resigns: whichever
// comes first, the follower takes over promptly (woken, or it saw the
// resignation when it registered), never at the term's expiry or the
// WaitRecheck re-check, which are half a minute and a minute here. Each
// round uses a new group, so its follower's registration races the
// resignation.
func TestResignNeverMissesAWaiter(t *testing.T) {
	e := newEnv(t)
	cfg := &sentinel.Config{WaitRecheck: time.Minute}
	leader, follower := e.client(cfg), e.client(cfg)
	const ttl = 30 * time.Second
	const rounds, parallel = 30, 3
	slowest := raceRounds(parallel, rounds, func(p, i int, r *rand.Rand) (time.Duration, bool) {
		group := fmt.Sprintf("race-%d-%d", p, i)
		el, electedL, stopL := electUntil(t, leader, group, ttl)
		<-electedL
		_, electedF, stopF := electUntil(t, follower, group, ttl)
		// Resign anywhere from before the follower's first
		// campaign to well after it registered.
		time.Sleep(time.Duration(r.IntN(8000)) * time.Microsecond)
		resigned := time.Now()
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := el.Resign(rctx)
		cancel()
		if err != nil {
			t.Error(err)
		}
		var d time.Duration
		select {
		case at := <-electedF:
			d = at.Sub(resigned)
		case <-time.After(20 * time.Second):
			t.Errorf("round %d/%d: the follower missed the resignation", p, i)
			stopF()
			stopL()
			return 0, false
		}
		stopF()
		stopL()
		return d, true
	})
	t.Logf("slowest take-over after resignation: %s", slowest)
	require.Less(t, slowest, 5*time.Second, "a wake-up or the re-check at registration, never the TTL")
}

// The ordering case a random race rarely hits, made deterministic: a draw
// takes its snapshot, then waits for the queue row (held here), while a
// follower registers, reads the history (the draw is not committed) and
// goes to sleep for a minute. When the draw goes on (its ticket waits
// behind a held one, so nothing else notifies), its registration
// read must see the follower (a locking read of the newest row version,
// not the snapshot's) and notify it.
func TestFollowQueuesSeesADrawThatStartedBeforeItRegistered(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := "registered over an existing row"
		if fresh {
			name = "registration creates the row"
		}
		t.Run(name, func(t *testing.T) { testFollowerRacesBlockedDraw(t, fresh) })
	}
}

// testFollowerRacesBlockedDraw: see above. fresh: the namespace has no
// queue_followers row when the draw takes its snapshot (created by the
// registration: the draw's insert conflicts with it and must read it).
func testFollowerRacesBlockedDraw(t *testing.T, fresh bool) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: time.Minute, WaitRecheck: time.Minute}
	holder, follower := e.client(cfg), e.client(cfg)
	turn, err := holder.Turn(ctx, "r") // the namespace's followers row exists from now on
	require.NoError(t, err)
	require.NoError(t, turn.Release(ctx))
	require.Equal(t, 1, e.count("queue_followers", "namespace = 'default' AND following_until < clock_timestamp()"))
	// Held, so that the waiting draw's serving check records nothing (and
	// notifies nothing): only the draw itself can wake the follower.
	first, err := holder.Turn(ctx, "r")
	require.NoError(t, err)
	if fresh {
		_, err = admin.Exec(ctx, "DELETE FROM "+e.table("queue_followers"))
		require.NoError(t, err)
	}

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE namespace = 'default' AND resource = 'r' FOR UPDATE")
	require.NoError(t, err)
	drawn := make(chan error, 1)
	go func() {
		turn, err := holder.Turn(ctx, "r")
		if err == nil {
			err = turn.Release(ctx)
		}
		drawn <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		_ = admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'",
			e.schema).Scan(&n)
		return n == 1
	}, 10*time.Second, 5*time.Millisecond, "the draw waits for the queue row")

	evs := followAll(t, follower)
	require.Eventually(t, func() bool {
		return e.count("queue_followers", "namespace = 'default' AND following_until > clock_timestamp()") == 1
	}, 10*time.Second, 5*time.Millisecond, "the follower registers while the draw waits")
	time.Sleep(200 * time.Millisecond) // it reads the history and sleeps
	start := time.Now()
	require.NoError(t, tx.Commit(ctx))
	select {
	case ev := <-evs:
		require.Equal(t, sentinel.QueueAssigned, ev.Type)
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(15 * time.Second):
		t.Fatal("the follower missed the draw that started before it registered")
	}
	require.NoError(t, first.Release(ctx))
	require.NoError(t, <-drawn)
}
