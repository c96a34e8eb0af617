package sentinel_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

const queueChildEnv = "SENTINEL_QUEUE_CHILD"

// A queue child process: it takes a turn (mode "hold": prints SERVED once
// served) or waits in the queue (mode "wait": prints DRAWN once its ticket
// is in the queue), then sleeps until it is killed.
func init() {
	mode := os.Getenv(queueChildEnv)
	if mode == "" {
		return
	}
	os.Exit(runQueueChild(mode))
}

func runQueueChild(mode string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("SENTINEL_CHILD_DB"))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: os.Getenv("SENTINEL_CHILD_SCHEMA"), DefaultTTL: 2 * time.Second})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	res := os.Getenv("SENTINEL_CHILD_KEY")
	switch mode {
	case "hold":
		t, err := c.Turn(ctx, res, sentinel.WithLabel("child holder"))
		if err != nil {
			fmt.Println("ERR", err)
			return 1
		}
		fmt.Println("SERVED", t.Ticket())
	case "wait":
		go func() {
			for {
				q, err := c.Queue(ctx, res)
				if err == nil {
					for _, w := range q.Waiting {
						if w.Label == "child waiter" {
							fmt.Println("DRAWN", w.Ticket)
							return
						}
					}
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		_, err := c.Turn(ctx, res, sentinel.WithLabel("child waiter"))
		fmt.Println("ERR", err)
		return 1
	default:
		return 2
	}
	time.Sleep(time.Hour)
	return 0
}

// startQueueChild starts a child in mode on res and waits for its first
// line; it returns the process (to kill) and that line.
func startQueueChild(t *testing.T, e *env, mode, res string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), queueChildEnv+"="+mode, "SENTINEL_CHILD_DB="+dbURL,
		"SENTINEL_CHILD_SCHEMA="+e.schema, "SENTINEL_CHILD_KEY="+res)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			line <- s.Text()
		} else {
			line <- "EOF"
		}
	}()
	select {
	case l := <-line:
		return cmd, strings.TrimSpace(l)
	case <-time.After(60 * time.Second):
		t.Fatal("child said nothing")
		return nil, ""
	}
}

func TestTurnFIFOAcrossClients(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	clients := make([]*sentinel.Client, 4)
	for i := range clients {
		clients[i] = e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	}
	first, err := clients[0].Turn(ctx, "printer", sentinel.WithLabel("first"))
	require.NoError(t, err)

	var mu sync.Mutex
	var served []int
	var tickets []int64
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := clients[i%4].Turn(ctx, "printer", sentinel.WithLabel(fmt.Sprintf("job %d", i)))
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			served = append(served, i)
			tickets = append(tickets, tn.Ticket())
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			if err := tn.Release(ctx); err != nil {
				errs <- err
			}
		}()
		// Wait until waiter i's ticket is drawn: the draw order is known.
		waitWaiting(t, clients[0], "printer", i+1)
	}
	q, err := clients[1].Queue(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, first.Ticket(), q.Holder.Ticket)
	for i, w := range q.Waiting {
		require.Equal(t, fmt.Sprintf("job %d", i), w.Label)
	}
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	want := make([]int, 20)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, served)
	require.True(t, slices.IsSorted(tickets), "tickets served out of order: %v", tickets)
}

func TestTurnNeverTwoHolders(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	clients := make([]*sentinel.Client, 3)
	for i := range clients {
		clients[i] = e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	}
	var inside atomic.Int32
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	errs := make(chan error, 12*8)
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%len(clients)]
			for range 8 {
				tn, err := c.Turn(ctx, "shared")
				if err != nil {
					errs <- err
					return
				}
				if n := inside.Add(1); n != 1 {
					errs <- fmt.Errorf("%d holders at once", n)
				}
				mu.Lock()
				order = append(order, tn.Ticket())
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := tn.Release(ctx); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, order, 96)
	require.True(t, slices.IsSorted(order), "served out of ticket order: %v", order)

	// The history agrees: every ticket granted once, in increasing order,
	// each after the previous one completed.
	h, err := clients[0].QueueHistory(ctx, "shared", 0, 10000)
	require.NoError(t, err)
	var granted []int64
	holding := int64(0)
	for _, ev := range h {
		switch ev.Type {
		case sentinel.QueueGranted:
			require.Zero(t, holding, "ticket %d granted while %d held", ev.Ticket, holding)
			holding = ev.Ticket
			granted = append(granted, ev.Ticket)
		case sentinel.QueueCompleted:
			require.Equal(t, holding, ev.Ticket)
			holding = 0
		}
	}
	require.Equal(t, order, granted)
}

// waitWaiting waits (up to 30s) until resource's queue has n waiters
// behind its holder.
func waitWaiting(t *testing.T, c *sentinel.Client, resource string, n int) {
	t.Helper()
	ctx := ctxT(t)
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, resource)
		return err == nil && len(q.Waiting) == n
	}, 30*time.Second, 5*time.Millisecond, "waiting for %d waiters on %q", n, resource)
}

// servedAt takes a turn on resource in the background; the channel gets
// the time it was served (the turn is then released) or is closed unserved.
func servedAt(ctx context.Context, c *sentinel.Client, resource, label string) <-chan time.Time {
	got := make(chan time.Time, 1)
	go func() {
		tn, err := c.Turn(ctx, resource, sentinel.WithLabel(label))
		if err == nil {
			got <- time.Now()
			_ = tn.Release(ctx)
		}
		close(got)
	}()
	return got
}

func TestTurnHolderKilledNextServedWithinTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	cmd, line := startQueueChild(t, e, "hold", "press")
	require.True(t, strings.HasPrefix(line, "SERVED"), line)

	got := servedAt(ctx, c, "press", "survivor")
	waitWaiting(t, c, "press", 1)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	at, ok := <-got
	require.True(t, ok, "waiter was not served")
	wait := at.Sub(killed)
	t.Logf("next served %v after the holder was killed (TTL 2s)", wait)
	require.Less(t, wait, 3*time.Second)

	h, err := c.QueueHistory(ctx, "press", 0, 100)
	require.NoError(t, err)
	var types []string
	for _, ev := range h {
		types = append(types, ev.Type)
	}
	require.Contains(t, types, sentinel.QueueCrashed)
}

func TestTurnDeadWaiterDoesNotStall(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 2 * time.Second})
	holder, err := c.Turn(ctx, "lathe")
	require.NoError(t, err)
	cmd, line := startQueueChild(t, e, "wait", "lathe")
	require.True(t, strings.HasPrefix(line, "DRAWN"), line)

	got := servedAt(ctx, c, "lathe", "behind the dead one")
	waitWaiting(t, c, "lathe", 2)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	require.NoError(t, holder.Release(ctx))
	at, ok := <-got
	require.True(t, ok, "waiter was not served")
	wait := at.Sub(killed)
	t.Logf("served %v after the waiter ahead was killed (TTL 2s)", wait)
	require.Less(t, wait, 3*time.Second)

	h, err := c.QueueHistory(ctx, "lathe", 0, 100)
	require.NoError(t, err)
	// The release hands the turn to the next live ticket: the killed
	// waiter's ticket is granted if it had not expired yet (then it is
	// recorded as crashed when skipped), else skipped as bumped.
	var skipped bool
	for _, ev := range h {
		if (ev.Type == sentinel.QueueBumped || ev.Type == sentinel.QueueCrashed) && ev.Label == "child waiter" {
			skipped = true
		}
	}
	require.True(t, skipped, "the dead waiter is recorded as bumped or crashed: %v", h)
}

func TestTurnCancelledWaiterLeavesAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{DefaultTTL: 5 * time.Second})
	holder, err := c.Turn(ctx, "kiln")
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := c.Turn(wctx, "kiln", sentinel.WithLabel("impatient"))
		gone <- err
	}()
	waitWaiting(t, c, "kiln", 1)
	second := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := c.Turn(ctx, "kiln", sentinel.WithLabel("patient"))
		if err == nil {
			second <- tn
		}
		close(second)
	}()
	waitWaiting(t, c, "kiln", 2)

	cancel()
	start := time.Now()
	err = <-gone
	require.ErrorIs(t, err, context.Canceled)
	q, err := c.Queue(ctx, "kiln")
	require.NoError(t, err)
	require.Len(t, q.Waiting, 1)
	require.Equal(t, "patient", q.Waiting[0].Label)
	require.Less(t, time.Since(start), time.Second)

	require.NoError(t, holder.Release(ctx))
	start = time.Now()
	tn, ok := <-second
	require.True(t, ok)
	require.Less(t, time.Since(start), time.Second, "the next ticket was not woken at once (TTL 5s)")
	require.NoError(t, tn.Release(ctx))

	h, err := c.QueueHistory(ctx, "kiln", 0, 100)
	require.NoError(t, err)
	var msgs []string
	for _, ev := range h {
		msgs = append(msgs, ev.String())
	}
	require.Equal(t, sentinel.QueueAssigned, h[2].Type)
	require.Contains(t, msgs, fmt.Sprintf("kiln: %d cancelled by \"impatient\"", h[2].Ticket))
}

func TestTurnResourceNames(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	names := []string{`it's "quoted"`, "100%", "a%", "ab", "*", "a*b", "with spaces ", `back\slash\`, "ünïcødé ✓ 打印机", "a_", "a.b", "'; DROP TABLE tickets; --"}
	var turns []*sentinel.Turn
	for _, n := range names {
		tn, err := c.Turn(ctx, n, sentinel.WithLabel("label of "+n))
		require.NoError(t, err, n)
		turns = append(turns, tn)
	}
	qs, err := c.Queues(ctx)
	require.NoError(t, err)
	var got []string
	for _, q := range qs {
		got = append(got, q.Resource)
		require.NotNil(t, q.Holder)
		require.Equal(t, "label of "+q.Resource, q.Holder.Label)
		require.Empty(t, q.Waiting)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	slices.Sort(got)
	require.Equal(t, want, got)
	for i, tn := range turns {
		q, err := c.Queue(ctx, names[i])
		require.NoError(t, err)
		require.Equal(t, tn.Ticket(), q.Holder.Ticket)
		require.NoError(t, tn.Release(ctx))
	}
	qs, err = c.Queues(ctx)
	require.NoError(t, err)
	require.Empty(t, qs)
}

func TestQueueStatusWithLabels(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	other := e.client(nil)
	h, err := c.Turn(ctx, "printer", sentinel.WithLabel("nightly report"))
	require.NoError(t, err)
	for i, l := range []string{"invoices", "labels"} {
		go func() { _, _ = other.Turn(ctx, "printer", sentinel.WithLabel(l)) }()
		waitWaiting(t, c, "printer", i+1)
	}
	q, err := c.Queue(ctx, "printer")
	require.NoError(t, err)
	require.Equal(t, "printer", q.Resource)
	require.Equal(t, "nightly report", q.Holder.Label)
	require.Equal(t, h.Ticket(), q.Holder.Ticket)
	require.False(t, q.Holder.ServedAt.IsZero())
	require.Equal(t, c.Owner(), q.Holder.Owner)
	require.Equal(t, os.Getpid(), q.Holder.PID)
	require.Len(t, q.Waiting, 2)
	require.Equal(t, "invoices", q.Waiting[0].Label)
	require.Equal(t, "labels", q.Waiting[1].Label)
	require.True(t, q.Waiting[0].ServedAt.IsZero())
	require.Less(t, q.Holder.Ticket, q.Waiting[0].Ticket)
	require.Less(t, q.Waiting[0].Ticket, q.Waiting[1].Ticket)
	require.Equal(t, other.Owner(), q.Waiting[1].Owner)

	empty, err := c.Queue(ctx, "nothing here")
	require.NoError(t, err)
	require.Nil(t, empty.Holder)
	require.Empty(t, empty.Waiting)

	qs, err := c.Queues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)
	require.Equal(t, *q.Holder, *qs[0].Holder)
}

func TestResetQueue(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	h, err := c.Turn(ctx, "vat")
	require.NoError(t, err)
	before := e.count("tickets", "")
	n, err := c.ResetQueue(ctx, "vat")
	require.ErrorIs(t, err, sentinel.ErrQueueBusy)
	var busy *sentinel.QueueBusyError
	require.ErrorAs(t, err, &busy)
	require.Equal(t, 1, busy.Live)
	require.Zero(t, n)
	require.Equal(t, before, e.count("tickets", ""))
	require.NoError(t, h.Release(ctx))

	// A ticket whose client vanished (its pool closed: no more renewals)
	// is dead once it expires; reset removes it.
	p := e.pool(nil)
	dying := e.clientOn(p, &sentinel.Config{DefaultTTL: 300 * time.Millisecond})
	_, err = dying.Turn(ctx, "vat", sentinel.WithLabel("vanished"))
	require.NoError(t, err)
	n, err = c.ResetQueue(ctx, "vat")
	require.ErrorIs(t, err, sentinel.ErrQueueBusy)
	require.Zero(t, n)
	p.Close()
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "vat")
		return err == nil && q.Holder == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, e.count("tickets", ""))
	n, err = c.ResetQueue(ctx, "vat")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, e.count("tickets", ""))
	hist, err := c.QueueHistory(ctx, "vat", 0, 100)
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, sentinel.QueueCrashed, last.Type)
	require.Equal(t, "vanished", last.Label)

	// ResetQueues: every queue; busy ones are reported and left alone.
	p2 := e.pool(nil)
	dying2 := e.clientOn(p2, &sentinel.Config{DefaultTTL: 300 * time.Millisecond})
	_, err = dying2.Turn(ctx, "dead one")
	require.NoError(t, err)
	busyTurn, err := c.Turn(ctx, "busy one")
	require.NoError(t, err)
	p2.Close()
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "dead one")
		return err == nil && q.Holder == nil
	}, 10*time.Second, 10*time.Millisecond)
	removed, err := c.ResetQueues(ctx)
	require.ErrorIs(t, err, sentinel.ErrQueueBusy)
	require.ErrorAs(t, err, &busy)
	require.Equal(t, "busy one", busy.Resource)
	require.Equal(t, map[string]int{"dead one": 1}, removed)
	require.Equal(t, 1, e.count("tickets", ""))
	require.NoError(t, busyTurn.Release(ctx))
}

func TestVerifyTurn(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	h, err := c.Turn(ctx, "ledger")
	require.NoError(t, err)
	waiter := make(chan *sentinel.Turn, 1)
	go func() {
		tn, err := c.Turn(ctx, "ledger")
		if err == nil {
			waiter <- tn
		}
		close(waiter)
	}()
	var waiting int64
	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "ledger")
		if err == nil && len(q.Waiting) == 1 {
			waiting = q.Waiting[0].Ticket
			return true
		}
		return false
	}, 10*time.Second, 5*time.Millisecond)

	require.ErrorIs(t, c.VerifyTurn(ctx, c.Pool(), "ledger", waiting), sentinel.ErrStaleToken)

	// The holder's guarded transaction holds off the next turn until it
	// commits.
	tx, err := c.Pool().Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, c.VerifyTurn(ctx, tx, "ledger", h.Ticket()))
	released := make(chan error, 1)
	go func() { released <- h.Release(ctx) }()
	select {
	case <-waiter:
		t.Fatal("the next turn was served while the holder's verified transaction was open")
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-released)
	next, ok := <-waiter
	require.True(t, ok)
	require.ErrorIs(t, c.VerifyTurn(ctx, c.Pool(), "ledger", h.Ticket()), sentinel.ErrStaleToken)
	require.NoError(t, c.VerifyTurn(ctx, c.Pool(), "ledger", next.Ticket()))
	require.NoError(t, next.Release(ctx))
}

func TestTurnAllSortedNoDeadlock(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c1, c2 := e.client(nil), e.client(nil)
	var inside [2]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, set := c1, []string{"b", "a", "b"}
			if g%2 == 1 {
				c, set = c2, []string{"a", "b"}
			}
			for range 5 {
				s, err := c.TurnAll(ctx, set, sentinel.WithLabel(fmt.Sprint("g", g)))
				if err != nil {
					errs <- err
					return
				}
				if len(s.Turns()) != 2 || s.Turns()[0].Resource() != "a" {
					errs <- fmt.Errorf("turns not sorted and deduplicated")
				}
				for i := range inside {
					if inside[i].Add(1) != 1 {
						errs <- errors.New("two holders")
					}
				}
				time.Sleep(time.Millisecond)
				for i := range inside {
					inside[i].Add(-1)
				}
				if err := s.Release(ctx); err != nil {
					errs <- err
				}
				<-s.Done()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// A failure on the second resource gives the first one back.
	h, err := c2.Turn(ctx, "b")
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err = c1.TurnAll(sctx, []string{"a", "b"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	q, err := c1.Queue(ctx, "a")
	require.NoError(t, err)
	require.Nil(t, q.Holder)
	require.NoError(t, h.Release(ctx))
}

func TestFollowQueues(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var lines []string
	done := make(chan error, 1)
	started := make(chan struct{})
	// Something before the follower starts is not delivered.
	old, err := c.Turn(ctx, "printer", sentinel.WithLabel("before"))
	require.NoError(t, err)
	require.NoError(t, old.Release(ctx))
	go func() {
		done <- c.FollowQueues(sentinel.WithFollowStarted(fctx, func() { close(started) }), []string{"printer"},
			func(ev sentinel.QueueEvent) error {
				mu.Lock()
				lines = append(lines, ev.String())
				mu.Unlock()
				return nil
			})
	}()
	<-started
	other, err := c.Turn(ctx, "scanner")
	require.NoError(t, err)
	t1, err := c.Turn(ctx, "printer", sentinel.WithLabel("nightly report"))
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	go func() { _, _ = c.Turn(wctx, "printer", sentinel.WithLabel("impatient")) }()
	waitWaiting(t, c, "printer", 1)
	cancel()
	waitWaiting(t, c, "printer", 0)
	require.NoError(t, t1.Release(ctx))
	require.NoError(t, other.Release(ctx))
	n := t1.Ticket()
	want := []string{
		fmt.Sprintf(`printer: %d assigned to "nightly report"`, n),
		fmt.Sprintf(`printer: %d granted`, n),
		fmt.Sprintf(`printer: %d assigned to "impatient"`, n+1),
		fmt.Sprintf(`printer: %d cancelled by "impatient"`, n+1),
		fmt.Sprintf(`printer: %d completed by "nightly report"`, n),
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got := len(lines)
		mu.Unlock()
		if got >= len(want) {
			break
		}
		if time.Now().After(deadline) {
			hist, _ := c.QueueHistory(ctx, "printer", 0, 100)
			mu.Lock()
			t.Fatalf("delivered %q, want %q; history %+v", lines, want, hist)
		}
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, want, lines)

	// WithAfterEvent replays what was recorded before the follower started,
	// from the given event on.
	hist, err := c.QueueHistory(ctx, "printer", 0, 100)
	require.NoError(t, err)
	require.Len(t, hist, 3+len(want)) // before: assigned, granted, completed
	var replay []string
	errEnough := errors.New("enough")
	err = c.FollowQueues(ctx, []string{"printer"}, func(ev sentinel.QueueEvent) error {
		replay = append(replay, ev.String())
		if len(replay) == len(want) {
			return errEnough
		}
		return nil
	}, sentinel.WithAfterEvent(hist[2].ID))
	require.ErrorIs(t, err, errEnough)
	require.Equal(t, want, replay)
	err = c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, sentinel.WithAfterEvent(-1))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	err = c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, sentinel.WithLabel("x"))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Queue(ctx, "printer", sentinel.WithAfterEvent(1))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
}

func TestTurnInvalidInput(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for name, call := range map[string]func() error{
		"empty resource": func() error { _, err := c.Turn(ctx, ""); return err },
		"NUL resource":   func() error { _, err := c.Turn(ctx, "a\x00b"); return err },
		"long label": func() error {
			_, err := c.Turn(ctx, "r", sentinel.WithLabel(strings.Repeat("x", sentinel.MaxLabelLen+1)))
			return err
		},
		"bad UTF-8 label": func() error { _, err := c.Turn(ctx, "r", sentinel.WithLabel("\xff")); return err },
		"WithWait":        func() error { _, err := c.Turn(ctx, "r", sentinel.WithWait()); return err },
		"zero TTL":        func() error { _, err := c.Turn(ctx, "r", sentinel.WithTTL(0)); return err },
		"bad ticket":      func() error { return c.VerifyTurn(ctx, c.Pool(), "r", 0) },
		"reset empty":     func() error { _, err := c.ResetQueue(ctx, ""); return err },
		"TurnAll none":    func() error { _, err := c.TurnAll(ctx, nil); return err },
		"follow nil fn":   func() error { return c.FollowQueues(ctx, nil, nil) },
	} {
		err := call()
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
	}
	// A short label that is not UTF-8 is refused for that, not as too
	// long ("must be at most 256 bytes ..., got 1 bytes").
	_, err := c.Turn(ctx, "r", sentinel.WithLabel("\xff"))
	require.ErrorContains(t, err, "UTF-8")
	require.NotContains(t, err.Error(), "got 1 bytes")
	require.Zero(t, e.count("tickets", ""))
	require.Zero(t, e.count("queue_events", ""))
}

func TestTurnCloseGivesTicketsBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	a := e.client(&sentinel.Config{DefaultTTL: 10 * time.Second})
	b := e.client(nil)
	_, err := a.Turn(ctx, "drill")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		tn, err := b.Turn(ctx, "drill")
		if err == nil {
			err = tn.Release(ctx)
		}
		served <- err
	}()
	waitWaiting(t, b, "drill", 1)
	start := time.Now()
	a.Close()
	require.NoError(t, <-served)
	require.Less(t, time.Since(start), 2*time.Second, "Close must give the turn back, not leave it to expire (TTL 10s)")
}

func TestFollowAllQueues(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var lines []string
	done := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		done <- c.FollowQueues(sentinel.WithFollowStarted(fctx, func() { close(started) }), nil, func(ev sentinel.QueueEvent) error {
			mu.Lock()
			lines = append(lines, ev.String())
			mu.Unlock()
			return nil
		})
	}()
	<-started
	for _, r := range []string{"a", "b 'quoted' %"} {
		tn, err := c.Turn(ctx, r, sentinel.WithLabel("x"))
		require.NoError(t, err)
		require.NoError(t, tn.Release(ctx))
	}
	// Another namespace is not followed.
	tn, err := c.Turn(ctx, "a", sentinel.WithNamespace("other"))
	require.NoError(t, err)
	require.NoError(t, tn.Release(ctx))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(lines) >= 6
	}, 10*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{`a: 1 assigned to "x"`, `a: 1 granted`, `a: 1 completed by "x"`,
		`b 'quoted' %: 2 assigned to "x"`, `b 'quoted' %: 2 granted`, `b 'quoted' %: 2 completed by "x"`}, lines)
}

// Waiters of one client behind its own tickets send no statements while
// they wait: the heartbeat renews every ticket in one statement per tick,
// and a waiter is woken in-process when the ticket ahead of it ends.
func TestTurnWaitersOfOneClientStayQuiet(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	// Not shorter: with 600ms a loaded CI machine once stalled the
	// heartbeat past the tickets' deadline (0 statements in 1.8s).
	const ttl = 1500 * time.Millisecond
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	holder, err := c.Turn(ctx, "press")
	require.NoError(t, err)
	var mu sync.Mutex
	var order []int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tn, err := c.Turn(ctx, "press")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, tn.Ticket())
			mu.Unlock()
			_ = tn.Release(ctx)
		}()
	}
	waitWaiting(t, c, "press", 20)
	time.Sleep(2 * ttl) // their first checks are done
	before := e.stmts.n.Load()
	time.Sleep(3 * ttl)
	sent := e.stmts.n.Load() - before
	// 3 TTLs: about 9 heartbeat ticks (one statement each, at most two per
	// interval). One re-check per waiter per TTL would be 60 more.
	t.Logf("%d statements in %s with 20 waiters (TTL %s)", sent, 3*ttl, ttl)
	require.LessOrEqual(t, sent, int64(20))
	require.NoError(t, holder.Release(ctx))
	wg.Wait()
	require.Len(t, order, 20)
	require.True(t, slices.IsSorted(order), "served out of ticket order: %v", order)
}

// Issue 17.4: the holder releases while the waiter behind it gives up.
// Each leave statement used to see the other's row still present: the
// holder woke the departing waiter, which woke nobody (a live ticket was
// below it), and the live ticket behind both slept until the departed
// ticket's expiry. Randomised over many rounds, the ticket behind must be
// served at once, never at that expiry (TTL 5s). Three clients, so that no
// in-process wake-up (wakeBehind) can hide a lost notification.
func TestTurnReleaseRacingCancelWakesNext(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: 5 * time.Second}
	ch, cw1, cw2 := e.client(cfg), e.client(cfg), e.client(cfg)
	const rounds = 50
	var slow []string
	served := 0 // rounds where W1 was served before its ctx ended
	for i := range rounds {
		res := fmt.Sprintf("race-%d", i)
		h, err := ch.Turn(ctx, res, sentinel.WithLabel("H"))
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		gone := make(chan error, 1)
		go func() {
			tn, err := cw1.Turn(wctx, res, sentinel.WithLabel("W1"))
			if err == nil { // served before its ctx ended: leave at once
				_ = tn.Release(ctx)
			}
			gone <- err
		}()
		waitWaiting(t, ch, res, 1)
		got := servedAt(ctx, cw2, res, "W2")
		waitWaiting(t, ch, res, 2)

		// Release and cancel within a few milliseconds of each other,
		// in either order.
		delay := func() time.Duration { return time.Duration(rand.IntN(1500)) * time.Microsecond }
		dc, dr := delay(), delay()
		go func() {
			time.Sleep(dc)
			cancel()
		}()
		time.Sleep(dr)
		released := time.Now()
		require.NoError(t, h.Release(ctx))
		at, ok := <-got
		require.True(t, ok, "round %d: W2 was not served", i)
		if err := <-gone; err == nil {
			served++
		}
		if wait := at.Sub(released); wait >= time.Second {
			slow = append(slow, fmt.Sprintf("round %d (cancel +%v, release +%v): W2 served %v after the release",
				i, dc, dr, wait.Round(time.Millisecond)))
			break // each lost wake-up costs a TTL: one is enough
		}
	}
	t.Logf("W1 served before its cancellation in %d of %d rounds", served, rounds)
	require.Empty(t, slow, "the ticket behind slept until the departed ticket's expiry (TTL 5s)")
}

// The same race made certain: a transaction holds both departing tickets'
// rows (FOR KEY SHARE, as a guard would), so both leaves start and wait
// for their own rows (sqlLeaveLockTicket) before either decides; both then
// proceed at once, and decide one after the other under the queue's lock.
// The ticket behind must still be woken at once.
func TestTurnReleaseAndCancelHeldTogetherWakeNext(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	cfg := &sentinel.Config{DefaultTTL: 5 * time.Second}
	ch, cw1, cw2 := e.client(cfg), e.client(cfg), e.client(cfg)
	h, err := ch.Turn(ctx, "kiln", sentinel.WithLabel("H"))
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	gone := make(chan error, 1)
	go func() {
		_, err := cw1.Turn(wctx, "kiln", sentinel.WithLabel("W1"))
		gone <- err
	}()
	waitWaiting(t, ch, "kiln", 1)
	got := servedAt(ctx, cw2, "kiln", "W2")
	waitWaiting(t, ch, "kiln", 2)
	q, err := ch.Queue(ctx, "kiln")
	require.NoError(t, err)

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("tickets")+" WHERE namespace = 'default' AND resource = 'kiln' AND ticket = ANY($1) FOR KEY SHARE",
		[]int64{h.Ticket(), q.Waiting[0].Ticket})
	require.NoError(t, err)
	released := make(chan error, 1)
	go func() { released <- h.Release(ctx) }()
	cancel()
	// Both leaves are now waiting for their rows.
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%.tickets t%'`).Scan(&n)
		return err == nil && n >= 2
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, tx.Commit(ctx))
	start := time.Now()
	require.NoError(t, <-released)
	require.ErrorIs(t, <-gone, context.Canceled)
	at, ok := <-got
	require.True(t, ok, "W2 was not served")
	require.Less(t, at.Sub(start), time.Second, "W2 slept until W1's expiry (TTL 5s)")
}

// A WaitRecheck so long that ten times it does not fit a time.Duration
// (math.MaxInt64: "never poll, rely on notifications"): a Turn waiting
// behind a ticket of its own client computed a negative safety re-check,
// and rand.N panicked in the caller's goroutine, leaving its ticket in the
// queue.
func TestTurnBehindItsOwnTicketWithAHugeWaitRecheck(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{WaitRecheck: math.MaxInt64})
	holder, err := c.Turn(ctx, "press")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				served <- fmt.Errorf("Turn panicked: %v", p)
			}
		}()
		tn, err := c.Turn(ctx, "press")
		if err == nil {
			err = tn.Release(ctx)
		}
		served <- err
	}()
	waitWaiting(t, c, "press", 1)
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, <-served)
}

// Every call skips a nil Option (one built conditionally); FollowQueues
// called it, and panicked in the caller's goroutine.
func TestFollowQueuesSkipsANilOption(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	var nsOpt sentinel.Option // no namespace given
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("FollowQueues panicked: %v", p)
			}
		}()
		return c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, nsOpt)
	}()
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// A nil ctx is refused by Turn and TurnAll, as by Lease: it panicked in the
// draw, after opening the process's listener's draw window, which then
// never closed (the LISTEN connection stayed open past ListenIdleTimeout).
func TestTurnRefusesANilContext(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	var nilCtx context.Context
	for name, call := range map[string]func() error{
		"Turn":    func() error { _, err := c.Turn(nilCtx, "r"); return err },
		"TurnAll": func() error { _, err := c.TurnAll(nilCtx, []string{"r", "s"}); return err },
	} {
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panicked: %v", p)
				}
			}()
			return call()
		}()
		require.ErrorIs(t, err, sentinel.ErrInvalid, name)
	}
	require.Zero(t, e.count("tickets", ""))
}

// A follower registers for four WaitRecheck periods (at least 30s) and
// sleeps up to one, so that statements recording queue events keep
// notifying it while it sleeps. With a WaitRecheck beyond a quarter of the
// longest duration (math.MaxInt64) four of them overflowed: it registered
// for 30s and slept without end, and once the registration lapsed nothing
// woke it again: FollowQueues delivered no further event.
func TestFollowQueuesWithAHugeWaitRecheckStaysRegistered(t *testing.T) {
	e := newEnv(t)
	c := e.client(&sentinel.Config{WaitRecheck: math.MaxInt64})
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil })
	}()
	require.Eventually(t, func() bool {
		return e.count("queue_followers", "following_until > now()") == 1
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, e.count("queue_followers", "following_until > now() + interval '100 years'"),
		"registered for less than the follower sleeps")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// A Turn whose ctx ended at the moment its ticket was granted gives the
// turn back: its caller gets ctx's error and never holds it. The history
// said `granted` then `completed`, a turn taken and done, when nobody
// took it; it says `granted` then `cancelled` now. Both ways a grant can
// meet an ended ctx: the leave ahead grants the waiting ticket, and the
// draw itself serves it (let finish after ctx ended, see Client.Turn).
func TestTurnGrantedAsItsContextEndedIsRecordedCancelled(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	ctx := ctxT(t)
	events := func(ticket int64) []string {
		h, err := c.QueueHistory(ctx, "kiln", 0, 100)
		require.NoError(t, err)
		var got []string
		for _, ev := range h {
			if ev.Ticket == ticket {
				got = append(got, ev.Type)
			}
		}
		return got
	}

	// Granted by the leave ahead, after the waiter's ctx ended.
	held, err := c.Turn(ctx, "kiln")
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	var waiter int64
	sentinel.SetAfterDraw(func(ticket int64) {
		if ticket <= held.Ticket() || waiter != 0 {
			return
		}
		waiter = ticket
		cancel()
		require.NoError(t, held.Release(ctx)) // grants the waiter
	})
	defer sentinel.SetAfterDraw(nil)
	_, err = c.Turn(wctx, "kiln", sentinel.WithLabel("late"))
	require.ErrorIs(t, err, context.Canceled)
	sentinel.SetAfterDraw(nil)
	require.NotZero(t, waiter)
	require.Equal(t, []string{sentinel.QueueAssigned, sentinel.QueueGranted, sentinel.QueueCancelled}, events(waiter))

	// Served by its own draw, which waited for the queue's lock while ctx
	// ended.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+e.table("queues")+" WHERE resource = 'kiln' FOR UPDATE")
	require.NoError(t, err)
	dctx, dcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.Turn(dctx, "kiln", sentinel.WithLabel("late too"))
		done <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE wait_event_type = 'Lock'"+
			" AND query LIKE '%INSERT INTO ' || $1 || '%'", e.table("queues")).Scan(&n)
		return err == nil && n == 1
	}, 30*time.Second, 5*time.Millisecond, "the draw waits for the queue's lock")
	dcancel()
	require.NoError(t, tx.Commit(ctx))
	require.ErrorIs(t, <-done, context.Canceled)
	var drawn int64
	require.NoError(t, admin.QueryRow(ctx, "SELECT max(ticket) FROM "+e.table("queue_events")).Scan(&drawn))
	require.Equal(t, []string{sentinel.QueueAssigned, sentinel.QueueGranted, sentinel.QueueCancelled}, events(drawn))
	require.Zero(t, e.count("tickets", ""))
}
