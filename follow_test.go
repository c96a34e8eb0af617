package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// collector gathers what a Follow delivers.
type collector struct {
	mu  sync.Mutex
	evs []sentinel.Event
	ch  chan struct{} // poked on every event
}

func newCollector() *collector { return &collector{ch: make(chan struct{}, 1)} }

func (c *collector) fn(e sentinel.Event) error {
	c.mu.Lock()
	c.evs = append(c.evs, e)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
	return nil
}

func (c *collector) events() []sentinel.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sentinel.Event(nil), c.evs...)
}

// waitFor waits until cond holds for the delivered events.
func (c *collector) waitFor(t *testing.T, what string, cond func([]sentinel.Event) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !cond(c.events()) {
		select {
		case <-c.ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; delivered %d events", what, len(c.events()))
		}
	}
}

// follow runs Follow in the background until the test ends; it returns
// the collector and a channel closed when Follow returned, with its result
// in *res.
func follow(t *testing.T, c *sentinel.Client, f sentinel.FollowFilter) (*collector, context.CancelFunc, <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	col := newCollector()
	res := make(chan error, 1)
	finished := make(chan struct{})
	started := make(chan struct{})
	go func() {
		err := c.Follow(sentinel.WithFollowStarted(ctx, func() { close(started) }), f, col.fn)
		if ctx.Err() == nil {
			t.Errorf("Follow ended early: %v", err)
		}
		res <- err
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	// Return once the follower holds its starting position (or failed).
	select {
	case <-started:
	case <-finished:
	}
	return col, cancel, res
}

// allEvents reads the whole event table of e, by id.
func allEvents(t *testing.T, e *env) []sentinel.Event {
	t.Helper()
	rows, err := admin.Query(ctxT(t), "SELECT id, namespace, key, event FROM "+e.table("events")+" ORDER BY id")
	require.NoError(t, err)
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sentinel.Event, error) {
		var ev sentinel.Event
		return ev, r.Scan(&ev.ID, &ev.Namespace, &ev.Key, &ev.Type)
	})
	require.NoError(t, err)
	return evs
}

func ids(evs []sentinel.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

// checkPerKeyOrder fails if a key's events were delivered out of ID order
// or twice.
func checkPerKeyOrder(t *testing.T, evs []sentinel.Event) {
	t.Helper()
	last := map[string]int64{}
	seen := map[int64]bool{}
	for _, e := range evs {
		require.False(t, seen[e.ID], "event %d delivered twice", e.ID)
		seen[e.ID] = true
		k := e.Namespace + "\x00" + e.Key
		require.Greater(t, e.ID, last[k], "key %q: event %d after %d", e.Key, e.ID, last[k])
		last[k] = e.ID
	}
}

func TestFollowConcurrentOnceExactlyOnce(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	col, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})

	const workers, perWorker = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cw := e.client(nil)
			for i := range perWorker {
				key := fmt.Sprintf("k-%d-%d", w, i)
				_, err := sentinel.Once(ctxT(t), cw, key, func(context.Context) (int, error) { return i, nil })
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	all := allEvents(t, e)
	require.Len(t, all, workers*perWorker*3) // claimed, started, completed
	col.waitFor(t, "every event", func(evs []sentinel.Event) bool { return len(evs) >= len(all) })
	time.Sleep(100 * time.Millisecond) // nothing more may come
	got := col.events()
	checkPerKeyOrder(t, got)
	gotIDs := ids(got)
	sort.Slice(gotIDs, func(i, j int) bool { return gotIDs[i] < gotIDs[j] })
	require.Equal(t, ids(all), gotIDs)
	for _, ev := range got {
		require.Equal(t, "default", ev.Namespace)
		require.Contains(t, []string{"claimed", "started", "completed"}, ev.Type)
		require.NotZero(t, ev.Token)
		require.False(t, ev.At.IsZero())
	}
}

// A follower attached in the middle of a burst delivers, for every key,
// an unbroken tail of its history, and everything after its start.
func TestFollowAttachDuringBurst(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	before, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})

	ctx := ctxT(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cw := e.client(nil)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := sentinel.Once(ctx, cw, fmt.Sprintf("b-%d-%d", w, i), func(context.Context) (int, error) { return i, nil })
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	before.waitFor(t, "the burst to start", func(evs []sentinel.Event) bool { return len(evs) > 60 })
	during, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})
	during.waitFor(t, "the late follower to deliver", func(evs []sentinel.Event) bool { return len(evs) > 0 })
	var head int64 // every event above it committed after the late follower had started
	require.NoError(t, admin.QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+e.table("events")).Scan(&head))
	during.waitFor(t, "more of the burst", func(evs []sentinel.Event) bool { return len(evs) > 150 })
	close(stop)
	wg.Wait()

	all := allEvents(t, e)
	before.waitFor(t, "every event (early follower)", func(evs []sentinel.Event) bool { return len(evs) >= len(all) })
	checkPerKeyOrder(t, before.events())
	gotIDs := ids(before.events())
	sort.Slice(gotIDs, func(i, j int) bool { return gotIDs[i] < gotIDs[j] })
	require.Equal(t, ids(all), gotIDs)

	var tail []int64
	for _, ev := range all {
		if ev.ID > head {
			tail = append(tail, ev.ID)
		}
	}
	has := func(evs []sentinel.Event) map[int64]bool {
		m := map[int64]bool{}
		for _, e := range evs {
			m[e.ID] = true
		}
		return m
	}
	during.waitFor(t, "every event after the late follower's start", func(evs []sentinel.Event) bool {
		m := has(evs)
		for _, id := range tail {
			if !m[id] {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond)
	late := during.events()
	checkPerKeyOrder(t, late)
	// Per key, the late follower holds a suffix of the key's history: it
	// may have started after a key's first events, never skipped one.
	m := has(late)
	byKey := map[string][]int64{}
	for _, ev := range all {
		byKey[ev.Key] = append(byKey[ev.Key], ev.ID)
	}
	for k, evIDs := range byKey {
		in := false
		for _, id := range evIDs {
			if m[id] {
				in = true
			} else {
				require.False(t, in, "key %s: event %d missing after a delivered one", k, id)
			}
		}
	}
	t.Logf("burst: %d Once calls, %d events; late follower delivered %d", n, len(all), len(late))
}

// The identity gap: an event whose id was drawn earlier but whose
// transaction commits later than higher ids is still delivered, whether the
// follower was running when the id was drawn or started after; one that
// rolls back never is, and the follower keeps going.
func TestFollowIdentityGap(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	early, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})

	insert := func(tx pgx.Tx, key string) int64 {
		var id int64
		require.NoError(t, tx.QueryRow(ctx, "INSERT INTO "+e.table("events")+
			" (namespace, key, event, state, token, owner) VALUES ('default', $1, 'manual', 'completed', 1, 'test') RETURNING id", key).Scan(&id))
		return id
	}
	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	slowID := insert(slow, "slow")
	doomed, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = doomed.Rollback(ctx) }()
	doomedID := insert(doomed, "doomed")

	_, err = sentinel.Once(ctx, c, "fast", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	early.waitFor(t, "the fast key", func(evs []sentinel.Event) bool { return len(evs) == 3 })

	// Started while slow's transaction is open, after higher ids committed.
	late, _, _ := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})
	time.Sleep(300 * time.Millisecond) // well past the gap grace: the gaps are waiting on their transactions

	require.NoError(t, doomed.Rollback(ctx))
	require.NoError(t, slow.Commit(ctx))
	_, err = sentinel.Once(ctx, c, "after", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	for name, col := range map[string]*collector{"early": early, "late": late} {
		col.waitFor(t, name+": slow and after", func(evs []sentinel.Event) bool {
			var s, a bool
			for _, ev := range evs {
				s = s || ev.ID == slowID
				a = a || ev.Key == "after" && ev.Type == "completed"
			}
			return s && a
		})
		for _, ev := range col.events() {
			require.NotEqual(t, doomedID, ev.ID)
		}
		checkPerKeyOrder(t, col.events())
	}
	require.Len(t, early.events(), 7) // fast x3, slow, after x3
	require.Len(t, late.events(), 4)  // slow, after x3
}

func TestFollowFilters(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	byKey, _, _ := follow(t, c, sentinel.FollowFilter{Keys: []string{"b", "<script>ü"}, PollInterval: 20 * time.Millisecond})
	byType, _, _ := follow(t, c, sentinel.FollowFilter{Types: []string{"completed"}, PollInterval: 20 * time.Millisecond})
	otherNS, _, _ := follow(t, c, sentinel.FollowFilter{Namespace: "billing", PollInterval: 20 * time.Millisecond})
	everything, _, _ := follow(t, c, sentinel.FollowFilter{AllNamespaces: true, PollInterval: 20 * time.Millisecond})

	for _, k := range []string{"a", "b", "<script>ü"} {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	_, err := sentinel.Once(ctx, c, "b", func(context.Context) (int, error) { return 1, nil },
		sentinel.WithNamespace("billing"), sentinel.WithMetadata(map[string]any{"who": "test"}))
	require.NoError(t, err)

	everything.waitFor(t, "all", func(evs []sentinel.Event) bool { return len(evs) == 12 })
	byKey.waitFor(t, "keys", func(evs []sentinel.Event) bool { return len(evs) == 6 })
	byType.waitFor(t, "types", func(evs []sentinel.Event) bool { return len(evs) == 3 })
	otherNS.waitFor(t, "namespace", func(evs []sentinel.Event) bool { return len(evs) == 3 })
	time.Sleep(100 * time.Millisecond)
	require.Len(t, byKey.events(), 6)
	for _, ev := range byKey.events() {
		require.Contains(t, []string{"b", "<script>ü"}, ev.Key)
		require.Equal(t, "default", ev.Namespace)
	}
	for _, ev := range byType.events() {
		require.Equal(t, "completed", ev.Type)
	}
	for _, ev := range otherNS.events() {
		require.Equal(t, "billing", ev.Namespace)
		require.Equal(t, "test", ev.Metadata["who"])
	}
	require.Len(t, byType.events(), 3)
	require.Len(t, otherNS.events(), 3)
	require.Len(t, everything.events(), 12)
}

// After resumes from an event id, including events committed before the
// call.
func TestFollowAfterResumes(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	for _, k := range []string{"a", "b"} {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	h, err := c.History(ctx, "a")
	require.NoError(t, err)
	col, _, _ := follow(t, c, sentinel.FollowFilter{After: h[len(h)-1].ID, PollInterval: 20 * time.Millisecond})
	col.waitFor(t, "b's events", func(evs []sentinel.Event) bool { return len(evs) == 3 })
	for _, ev := range col.events() {
		require.Equal(t, "b", ev.Key)
	}
}

func TestFollowEnds(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)

	// ctx cancelled: Follow returns promptly with ctx's error.
	_, cancel, done := follow(t, c, sentinel.FollowFilter{})
	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, "%v", err)
		require.Less(t, time.Since(t0), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end on ctx cancel")
	}

	// fn's error ends it and is returned unchanged.
	stop := errors.New("enough")
	errc := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		errc <- c.Follow(sentinel.WithFollowStarted(ctx, func() { close(started) }),
			sentinel.FollowFilter{PollInterval: 20 * time.Millisecond}, func(sentinel.Event) error { return stop })
	}()
	<-started
	_, err := sentinel.Once(ctx, c, "x", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	select {
	case err := <-errc:
		require.Equal(t, stop, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end on fn's error")
	}

	// Bad filters.
	for name, f := range map[string]sentinel.FollowFilter{
		"ns and all":     {Namespace: "x", AllNamespaces: true},
		"bad key":        {Keys: []string{""}},
		"bad type":       {Types: []string{""}},
		"negative after": {After: -1},
		"fast poll":      {PollInterval: time.Millisecond},
	} {
		err := c.Follow(ctx, f, func(sentinel.Event) error { return nil })
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
	}
	require.ErrorIs(t, c.Follow(ctx, sentinel.FollowFilter{}, nil), sentinel.ErrInvalid)

	// Close ends a running Follow with ErrClosed.
	c2 := e.client(nil)
	errc2 := make(chan error, 1)
	go func() {
		errc2 <- c2.Follow(ctx, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond}, func(sentinel.Event) error { return nil })
	}()
	time.Sleep(100 * time.Millisecond)
	c2.Close()
	select {
	case err := <-errc2:
		require.ErrorIs(t, err, sentinel.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end on Close")
	}
}

// Issue 17.8: a Follow resumed from the last event a previous Follow
// delivered misses nothing: an event whose ID is below that one but whose
// transaction commits after the first Follow stopped is delivered by the
// resumed one (once), and nothing the first one delivered comes again.
func TestFollowCursorResumesInFlightEvent(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	first, stop, done := follow(t, c, sentinel.FollowFilter{PollInterval: 20 * time.Millisecond})

	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	var slowID int64
	require.NoError(t, slow.QueryRow(ctx, "INSERT INTO "+e.table("events")+
		" (namespace, key, event, state, token, owner) VALUES ('default', 'slow', 'manual', 'completed', 1, 'test') RETURNING id").Scan(&slowID))
	for _, k := range []string{"a", "b"} {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	first.waitFor(t, "a and b", func(evs []sentinel.Event) bool { return len(evs) == 6 })
	time.Sleep(200 * time.Millisecond) // past the gap grace: the gap waits on slow's transaction
	stop()
	<-done
	delivered := first.events()
	require.Len(t, delivered, 6)
	last := delivered[len(delivered)-1]
	require.Greater(t, last.ID, slowID)
	require.NotEmpty(t, last.Cursor)
	t.Logf("first follow delivered %v, stopped at cursor %q", ids(delivered), last.Cursor)

	require.NoError(t, slow.Commit(ctx))
	_, err = sentinel.Once(ctx, c, "later", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	resumed, _, _ := follow(t, c, sentinel.FollowFilter{Cursor: last.Cursor, PollInterval: 20 * time.Millisecond})
	resumed.waitFor(t, "slow and later", func(evs []sentinel.Event) bool { return len(evs) == 4 })
	time.Sleep(100 * time.Millisecond)
	got := resumed.events()
	require.Len(t, got, 4, "resumed follow delivered %v", ids(got))
	require.Equal(t, slowID, got[0].ID, "the in-flight event is delivered first, once")
	for _, ev := range got[1:] {
		require.Equal(t, "later", ev.Key)
	}
	// Both follows together: every event of the table, each once.
	all := append(delivered, got...)
	checkPerKeyOrder(t, all)
	require.ElementsMatch(t, ids(allEvents(t, e)), ids(all))

	// An ID alone keeps After's meaning; Cursor and After together, or a
	// malformed cursor, are refused.
	for name, f := range map[string]sentinel.FollowFilter{
		"both":      {Cursor: "5", After: 5},
		"garbage":   {Cursor: "x"},
		"negative":  {Cursor: "-1"},
		"gap above": {Cursor: "5:7"},
		"unsorted":  {Cursor: "9:5,3"},
	} {
		err := c.Follow(ctx, f, func(sentinel.Event) error { return nil })
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
	}
}

// After (an ID alone) delivers an event below it whose transaction is
// still open when Follow starts, once it commits.
func TestFollowAfterDeliversEventStillInFlight(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	var slowID int64
	require.NoError(t, slow.QueryRow(ctx, "INSERT INTO "+e.table("events")+
		" (namespace, key, event, state, token, owner) VALUES ('default', 'slow', 'manual', 'completed', 1, 'test') RETURNING id").Scan(&slowID))
	_, err = sentinel.Once(ctx, c, "a", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	h, err := c.History(ctx, "a")
	require.NoError(t, err)
	last := h[len(h)-1].ID
	require.Greater(t, last, slowID)

	col, _, _ := follow(t, c, sentinel.FollowFilter{After: last, PollInterval: 20 * time.Millisecond})
	time.Sleep(200 * time.Millisecond) // past the gap grace
	require.NoError(t, slow.Commit(ctx))
	col.waitFor(t, "the slow event", func(evs []sentinel.Event) bool { return len(evs) == 1 })
	require.Equal(t, slowID, col.events()[0].ID)
}

// FollowHead's cursor is exact: an event of a transaction under way when
// it was read, with an ID below the head, that commits before the Follow
// from that cursor starts, is delivered (the console's live view follows
// from the head read with the page: it missed such a change). A bare head
// ID read it as seen.
func TestFollowHeadKeepsEventsInFlight(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	var slowID int64
	require.NoError(t, slow.QueryRow(ctx, "INSERT INTO "+e.table("events")+
		" (namespace, key, event, state, token, owner) VALUES ('default', 'slow', 'manual', 'completed', 1, 'test') RETURNING id").Scan(&slowID))
	_, err = sentinel.Once(ctx, c, "a", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	head, err := c.FollowHead(ctx)
	require.NoError(t, err)
	require.NoError(t, slow.Commit(ctx)) // before the Follow starts
	col, _, _ := follow(t, c, sentinel.FollowFilter{Cursor: head, PollInterval: 20 * time.Millisecond})
	col.waitFor(t, "the event in flight at the head", func(evs []sentinel.Event) bool {
		for _, ev := range evs {
			if ev.ID == slowID {
				return true
			}
		}
		return false
	})
	for _, ev := range col.events() {
		require.NotEqual(t, "a", ev.Key, "a's events were before the head: %q", head)
	}
}

// OnRead is called after every read that succeeded: the one that finds the
// starting position (before OnStart), and each later one, quiet or not,
// before the events it found are delivered.
func TestFollowOnRead(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	var reads atomic.Int64
	var atStart, atEvent atomic.Int64
	atEvent.Store(-1)
	f := sentinel.FollowFilter{PollInterval: 20 * time.Millisecond,
		OnRead:  func() { reads.Add(1) },
		OnStart: func() { atStart.Store(reads.Load()) },
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Follow(ctx, f, func(sentinel.Event) error {
			atEvent.CompareAndSwap(-1, reads.Load())
			return nil
		})
	}()
	require.Eventually(t, func() bool { return reads.Load() >= 3 }, 10*time.Second, 10*time.Millisecond, "quiet reads call OnRead")
	require.EqualValues(t, 1, atStart.Load(), "OnStart after the starting read's OnRead")
	before := reads.Load()
	_, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.Eventually(t, func() bool { return atEvent.Load() >= 0 }, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, atEvent.Load(), before, "the read that found the event called OnRead before delivering it")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
