package sentinel_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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

// A lease handed on by its handle (Lease.Detach) and taken up by the
// worker as a Lease of its own (Client.AdoptHandle). Two clients on two
// pools stand for the two processes, except where a real process is
// killed.

// leaseRow is a lease row as it is, every column, for "nothing was
// written" (with the token sequence's position).
func leaseRow(t *testing.T, e *env, key string) string {
	t.Helper()
	var row, seq string
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT coalesce((SELECT row_to_json(t)::text FROM "+e.table("leases")+" t WHERE t.key = $1), 'none')", key).Scan(&row))
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT last_value::text FROM "+e.table("fencing_token")).Scan(&seq))
	return row + " seq=" + seq
}

// detached acquires key on dispatcher and hands it on.
func detached(t *testing.T, dispatcher *sentinel.Client, key string, opts ...sentinel.Option) sentinel.LeaseHandle {
	t.Helper()
	l, err := dispatcher.Lease(ctxT(t), key, opts...)
	require.NoError(t, err)
	h, err := l.Detach()
	require.NoError(t, err)
	return h
}

// After the handoff the row names the process that does the work, and
// the dispatcher's token is stale: with RenewHandle alone the row went
// on naming the dispatcher's owner, host and pid (the operator who asked
// who holds the key was sent to the wrong process), and a dispatcher
// still writing with its token after Detach passed VerifyToken.
func TestAdoptHandleNamesTheWorkerAndFencesTheDispatcher(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher := e.client(&sentinel.Config{Owner: "dispatcher", Host: "dispatch-host", PID: 101})
	worker := e.client(&sentinel.Config{Owner: "worker", Host: "worker-host", PID: 202})
	h := detached(t, dispatcher, "job-42", sentinel.WithTTL(5*time.Second))
	before, err := dispatcher.Holder(ctx, "job-42")
	require.NoError(t, err)
	require.Equal(t, "dispatch-host", before.Host)

	l, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(4*time.Second))
	require.NoError(t, err)
	defer l.Release(ctx)
	require.Greater(t, l.Token(), h.Token, "a new token, larger than the handle's")
	require.Equal(t, "worker", l.Owner())
	require.Equal(t, "job-42", l.Key())
	require.Equal(t, "default", l.Namespace())
	require.NoError(t, l.Err())

	holder, err := dispatcher.Holder(ctx, "job-42")
	require.NoError(t, err)
	require.Equal(t, "worker", holder.Owner)
	require.Equal(t, "worker-host", holder.Host)
	require.Equal(t, 202, holder.PID)
	require.Equal(t, l.Token(), holder.Token)
	require.True(t, holder.AcquiredAt.After(before.AcquiredAt), "a new grant: acquired at the adoption")
	require.WithinDuration(t, holder.AcquiredAt.Add(4*time.Second), holder.ExpiresAt, 50*time.Millisecond, "one TTL (WithTTL) from the adoption")
	require.Equal(t, l.ExpiresAt(), holder.ExpiresAt)

	// The dispatcher's token fails fencing; the worker's passes.
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	err = dispatcher.VerifyToken(ctx, tx, "job-42", h.Token)
	var stale *sentinel.StaleTokenError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, l.Token(), stale.Current)
	require.NoError(t, worker.VerifyToken(ctx, tx, "job-42", l.Token()))
	require.NoError(t, tx.Rollback(ctx))

	// The handle acts on nothing any more, whoever holds a copy of it.
	_, err = dispatcher.RenewHandle(ctx, h, 5*time.Second)
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	require.ErrorIs(t, dispatcher.ReleaseHandle(ctx, h), sentinel.ErrStaleToken)
	require.NoError(t, l.Err(), "the refused handle calls left the adopted lease alone")

	require.NoError(t, l.Release(ctx))
	_, err = dispatcher.Holder(ctx, "job-42")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the worker's Release frees the key")
}

// The adopted lease is a Lease like any other: Context is cancelled with
// the loss, the Observer hears of the adoption (LeaseEnd, Adopted) and of
// the loss (LeaseLost), it can be handed on again (Detach, then adopted
// by a third process), and Close releases it.
func TestAdoptedLeaseIsAnOrdinaryLease(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	var (
		mu     sync.Mutex
		events []sentinel.LeaseEvent
		losses []sentinel.LeaseLoss
	)
	obs := &sentinel.Observer{
		LeaseEnd:  func(_ context.Context, ev sentinel.LeaseEvent) { mu.Lock(); events = append(events, ev); mu.Unlock() },
		LeaseLost: func(l sentinel.LeaseLoss) { mu.Lock(); losses = append(losses, l); mu.Unlock() },
	}
	dispatcher, worker, third := e.client(nil), e.client(&sentinel.Config{Observer: obs}), e.client(nil)

	h := detached(t, dispatcher, "job")
	l, err := worker.AdoptHandle(ctx, h)
	require.NoError(t, err)
	_, err = worker.AdoptHandle(ctx, h) // adopted already
	require.ErrorIs(t, err, sentinel.ErrStaleToken)
	mu.Lock()
	require.Len(t, events, 2)
	require.Equal(t, sentinel.LeaseEvent{Namespace: "default", Key: "job", Acquired: true, Token: l.Token(), Adopted: true, Duration: events[0].Duration}, events[0])
	require.True(t, events[1].Adopted)
	require.False(t, events[1].Acquired)
	require.ErrorIs(t, events[1].Err, sentinel.ErrStaleToken)
	mu.Unlock()

	// Handed on again: the third process adopts it from the worker.
	h2, err := l.Detach()
	require.NoError(t, err)
	require.Equal(t, l.Handle(), h2)
	require.ErrorIs(t, l.Err(), sentinel.ErrDetached)
	l3, err := third.AdoptHandle(ctx, h2)
	require.NoError(t, err)
	require.Greater(t, l3.Token(), h2.Token)

	// Lost: taken over by force. Context is cancelled with the loss, and
	// the Observer hears of it.
	h3, err := l3.Detach()
	require.NoError(t, err)
	l4, err := worker.AdoptHandle(ctx, h3)
	require.NoError(t, err)
	work, cancel := l4.Context(ctx)
	defer cancel()
	forced, err := dispatcher.Lease(ctx, "job", sentinel.WithForce())
	require.NoError(t, err)
	defer forced.Release(ctx)
	require.ErrorIs(t, l4.Heartbeat(ctx), sentinel.ErrLeaseLost)
	<-work.Done()
	require.ErrorIs(t, context.Cause(work), sentinel.ErrLeaseLost)
	mu.Lock()
	require.Len(t, losses, 1)
	require.Equal(t, l4.Token(), losses[0].Token)
	require.Equal(t, sentinel.LossLease, losses[0].Kind)
	mu.Unlock()

	// Close releases an adopted lease as it does any other.
	l5, err := worker.AdoptHandle(ctx, detached(t, dispatcher, "job-2"))
	require.NoError(t, err)
	worker.Close()
	require.ErrorIs(t, l5.Err(), sentinel.ErrReleased)
	_, err = dispatcher.Holder(ctx, "job-2")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "Close released the adopted lease")
	_, err = worker.AdoptHandle(ctx, l5.Handle())
	require.ErrorIs(t, err, sentinel.ErrClosed)
}

// The worker's own heartbeat renews the adopted lease: the row outlives
// three TTLs after the dispatcher is gone, naming the worker's process.
// When that process dies (SIGKILL: no release), the key frees within
// its TTL. A real process, so that nothing of it lives on.
func TestAdoptedLeaseLivesByTheWorkerAndFreesWhenItDies(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	const ttl = time.Second
	dispatcher, operator := e.client(nil), e.client(nil)
	// The handle stays current while the child starts (a race-built test
	// binary, on a loaded machine, took longer than a short TTL to get
	// there: its adoption found the grant expired); the child's adoption
	// gives the lease the child's TTL, which is what is checked below.
	h := detached(t, dispatcher, "job", sentinel.WithTTL(time.Minute))
	msg, err := json.Marshal(h)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=adopt", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+e.schema,
		"SENTINEL_CHILD_TTL="+ttl.String(), "SENTINEL_CHILD_HANDLE="+string(msg))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		s.Scan()
		line <- s.Text()
	}()
	var token int64
	select {
	case l := <-line:
		tok, ok := strings.CutPrefix(l, "ADOPTED ")
		require.True(t, ok, "the child said %q", l)
		token, err = strconv.ParseInt(tok, 10, 64)
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the child never adopted the lease")
	}
	require.Greater(t, token, h.Token)
	dispatcher.Close() // the dispatcher is gone

	// Held, by the child, for more than three TTLs.
	until := time.Now().Add(4 * ttl)
	for time.Now().Before(until) {
		holder, err := operator.Holder(ctx, "job")
		require.NoError(t, err, "the adopted lease must be renewed by the worker's heartbeat")
		require.Equal(t, token, holder.Token)
		require.Equal(t, cmd.Process.Pid, holder.PID, "the row names the worker's process")
		time.Sleep(50 * time.Millisecond)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed := time.Now()
	waitFor(t, 10*time.Second, "the key to free", func() bool {
		_, err := operator.Holder(ctx, "job")
		return errors.Is(err, sentinel.ErrNotFound)
	})
	freed := time.Since(killed)
	t.Logf("freed %s after the worker was killed (TTL %s)", freed, ttl)
	// Within one TTL of its last renewal, here with slack for a loaded
	// machine (and for the polling).
	require.Less(t, freed, 3*ttl)
}

// A handle that is not the lease's current grant is refused
// (ErrStaleToken) and nothing is written: no row changes, no token is
// minted.
func TestAdoptHandleStaleWritesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker, other := e.client(nil), e.client(nil), e.client(nil)

	refused := func(h sentinel.LeaseHandle, current int64, what string) {
		t.Helper()
		before := leaseRow(t, e, h.Key)
		l, err := worker.AdoptHandle(ctx, h)
		require.Nil(t, l, what)
		var stale *sentinel.StaleTokenError
		require.ErrorAs(t, err, &stale, what)
		require.Equal(t, sentinel.StaleTokenError{Namespace: h.Namespace, Key: h.Key, Token: h.Token, Current: current}, *stale, what)
		require.Equal(t, before, leaseRow(t, e, h.Key), "%s: nothing is written", what)
	}

	released := detached(t, dispatcher, "released")
	require.NoError(t, dispatcher.ReleaseHandle(ctx, released))
	refused(released, 0, "a released handle")

	expired := detached(t, dispatcher, "expired", sentinel.WithTTL(sentinel.MinTTL))
	waitFor(t, 10*time.Second, "the lease to expire", func() bool {
		_, err := dispatcher.Holder(ctx, "expired")
		return errors.Is(err, sentinel.ErrNotFound)
	})
	refused(expired, 0, "an expired handle")

	hard := detached(t, dispatcher, "hard", sentinel.WithTTL(sentinel.MinTTL), sentinel.WithHardTTL(sentinel.MinTTL))
	waitFor(t, 10*time.Second, "the lease to pass its hard TTL", func() bool {
		_, err := dispatcher.Holder(ctx, "hard")
		return errors.Is(err, sentinel.ErrNotFound)
	})
	refused(hard, 0, "a handle past its hard TTL")

	h := detached(t, dispatcher, "adopted")
	first, err := other.AdoptHandle(ctx, h)
	require.NoError(t, err)
	defer first.Release(ctx)
	refused(h, first.Token(), "a handle adopted already")

	taken := detached(t, dispatcher, "taken", sentinel.WithTTL(sentinel.MinTTL))
	waitFor(t, 10*time.Second, "the lease to expire", func() bool {
		_, err := dispatcher.Holder(ctx, "taken")
		return errors.Is(err, sentinel.ErrNotFound)
	})
	next, err := other.Lease(ctx, "taken")
	require.NoError(t, err)
	defer next.Release(ctx)
	refused(taken, next.Token(), "a handle whose key was granted to another since")

	live := detached(t, dispatcher, "live")
	wrongOwner := live
	wrongOwner.Owner = "someone-else"
	refused(wrongOwner, live.Token, "a handle naming another owner")
	wrongToken := live
	wrongToken.Token = live.Token - 1
	refused(wrongToken, live.Token, "a handle with another token")
	wrongNS := live
	wrongNS.Namespace = "elsewhere"
	refused(wrongNS, 0, "a handle of another namespace")
	l, err := worker.AdoptHandle(ctx, live)
	require.NoError(t, err, "the right handle is adopted after all these")
	require.NoError(t, l.Release(ctx))
}

// Bad input is refused (ErrInvalid) before any statement.
func TestAdoptHandleRefusesBadInput(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher := e.client(nil)
	var stmts counter
	worker := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = &stmts }), nil)
	h := detached(t, dispatcher, "job", sentinel.WithTTL(5*time.Second))
	before := leaseRow(t, e, "job")

	with := func(f func(*sentinel.LeaseHandle)) sentinel.LeaseHandle {
		c := h
		f(&c)
		return c
	}
	for _, tc := range []struct {
		what string
		h    sentinel.LeaseHandle
		opts []sentinel.Option
	}{
		{"the zero handle", sentinel.LeaseHandle{}, nil},
		{"no key", with(func(h *sentinel.LeaseHandle) { h.Key = "" }), nil},
		{"no namespace", with(func(h *sentinel.LeaseHandle) { h.Namespace = "" }), nil},
		{"no owner", with(func(h *sentinel.LeaseHandle) { h.Owner = "" }), nil},
		{"token 0", with(func(h *sentinel.LeaseHandle) { h.Token = 0 }), nil},
		{"a negative token", with(func(h *sentinel.LeaseHandle) { h.Token = -1 }), nil},
		{"WithWait", h, []sentinel.Option{sentinel.WithWait()}},
		{"WithForce", h, []sentinel.Option{sentinel.WithForce()}},
		{"WithCodec", h, []sentinel.Option{sentinel.WithCodec(sentinel.JSONCodec{})}},
		{"WithHardTTL", h, []sentinel.Option{sentinel.WithHardTTL(time.Minute)}},
		{"WithNamespace", h, []sentinel.Option{sentinel.WithNamespace("default")}},
		{"WithTTL(0)", h, []sentinel.Option{sentinel.WithTTL(0)}},
		{"WithTTL above MaxTTL", h, []sentinel.Option{sentinel.WithTTL(sentinel.MaxTTL + time.Second)}},
	} {
		n := stmts.n.Load()
		l, err := worker.AdoptHandle(ctx, tc.h, tc.opts...)
		require.Nil(t, l, tc.what)
		require.ErrorIs(t, err, sentinel.ErrInvalid, tc.what)
		require.Equal(t, n, stmts.n.Load(), "%s: no statement is sent", tc.what)
	}
	require.Equal(t, before, leaseRow(t, e, "job"), "nothing is written")
}

// Many workers given the same handle: exactly one adopts it, the others
// are told it is stale.
func TestAdoptHandleExactlyOneWinner(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	h := detached(t, e.client(nil), "job")
	const n = 8
	workers := make([]*sentinel.Client, n)
	for i := range workers {
		workers[i] = e.client(&sentinel.Config{Owner: fmt.Sprintf("worker-%d", i)})
	}
	var (
		won   atomic.Int32
		stale atomic.Int32
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := w.AdoptHandle(ctx, h)
			switch {
			case err == nil:
				won.Add(1)
				require.Greater(t, l.Token(), h.Token)
			case errors.Is(err, sentinel.ErrStaleToken):
				stale.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	require.EqualValues(t, 1, won.Load())
	require.EqualValues(t, n-1, stale.Load())
}

// A transaction guarded by the handle's token (a dispatcher still writing
// after Detach) keeps the adoption out until it ends: the adoption locks
// the row as every grant to someone else does, the lock VerifyToken's
// conflicts with, so the old token's guarded writes never commit after
// the new token exists. AdoptHandle retries for a renewal interval, then
// reports the row busy (ErrBusy), having written nothing; once the
// transaction ended it adopts, and the old token is stale.
func TestAdoptHandleWaitsOutAGuardedTransaction(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker := e.client(nil), e.client(nil)
	const ttl = 3 * time.Second // AdoptHandle retries a busy row for a second
	h := detached(t, dispatcher, "job", sentinel.WithTTL(ttl))

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	require.NoError(t, dispatcher.VerifyToken(ctx, tx, "job", h.Token))
	before := leaseRow(t, e, "job")
	_, err = worker.AdoptHandle(ctx, h, sentinel.WithTTL(ttl))
	require.ErrorIs(t, err, sentinel.ErrBusy)
	require.NotErrorIs(t, err, sentinel.ErrStaleToken)
	require.Equal(t, before, leaseRow(t, e, "job"), "nothing is written")

	committed := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		committed <- tx.Commit(ctx)
	}()
	l, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(ttl))
	require.NoError(t, <-committed)
	require.NoError(t, err, "adopted once the guarded transaction ended")
	defer l.Release(ctx)
	tx2, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(ctx)
	require.ErrorIs(t, dispatcher.VerifyToken(ctx, tx2, "job", h.Token), sentinel.ErrStaleToken)
}

// The caller's ctx ends while the adoption statement runs: the lease it
// adopted is released before AdoptHandle returns ctx's error, rather than
// left held, unknown to anyone, for a TTL.
func TestAdoptHandleCtxEndedDuringTheStatementGivesTheGrantBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher := e.client(nil)
	tr := &hookTracer{}
	worker := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), &sentinel.Config{DefaultTTL: time.Minute})
	tr.match = sentinel.AdoptSQL(worker)
	h := detached(t, dispatcher, "job", sentinel.WithTTL(time.Minute))

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := func() { cancel() } // the statement has committed, its reply is on its way
	tr.hook.Store(&f)
	l, err := worker.AdoptHandle(actx, h)
	require.Nil(t, l)
	require.ErrorIs(t, err, context.Canceled)
	require.Contains(t, err.Error(), "adopted as it ended: released")
	_, err = dispatcher.Holder(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was given back: the key is free at once, not in a minute")
	_, err = worker.AdoptHandle(ctx, h)
	require.ErrorIs(t, err, sentinel.ErrStaleToken, "the handle was consumed")
}

// Close begins while the adoption statement runs: the lease it adopted is
// released and AdoptHandle returns ErrClosed.
func TestAdoptHandleAsTheClientClosesGivesTheGrantBack(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher := e.client(nil)
	tr := &hookTracer{}
	worker := e.clientOn(e.pool(func(c *pgxpool.Config) { c.ConnConfig.Tracer = tr }), &sentinel.Config{DefaultTTL: time.Minute})
	tr.match = sentinel.AdoptSQL(worker)
	h := detached(t, dispatcher, "job", sentinel.WithTTL(time.Minute))

	closeDuring(tr, worker)
	l, err := worker.AdoptHandle(ctx, h)
	require.Nil(t, l)
	require.ErrorIs(t, err, sentinel.ErrClosed)
	_, err = dispatcher.Holder(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound, "the grant was given back")
}

// A hard TTL bounds the lease whoever holds it: the adoption keeps it,
// and the adopted lease ends at it (ErrHardTTL).
func TestAdoptHandleKeepsTheHardTTL(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker := e.client(nil), e.client(nil)
	h := detached(t, dispatcher, "job", sentinel.WithTTL(2*time.Second), sentinel.WithHardTTL(2500*time.Millisecond))
	before, err := dispatcher.Holder(ctx, "job")
	require.NoError(t, err)
	l, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(5*time.Second)) // its margin: 500ms
	require.NoError(t, err)
	adopted := time.Now()
	holder, err := dispatcher.Holder(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, before.HardExpiresAt, holder.HardExpiresAt, "the hard expiry is kept")
	require.Equal(t, before.HardExpiresAt, holder.ExpiresAt, "a TTL past the hard expiry is capped by it")
	require.Equal(t, holder.ExpiresAt, l.ExpiresAt())
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted lease outlived its hard TTL")
	}
	require.Greater(t, time.Since(adopted), time.Second, "held until its margin before the hard expiry (%s)", l.Err())
	require.ErrorIs(t, l.Err(), sentinel.ErrHardTTL)
}

// A caller waiting for the key (WithWait) waits on through the adoption,
// which wakes nobody, and is handed the key by the worker's release.
func TestAdoptHandleKeepsTheWaiters(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	dispatcher, worker, waiter := e.client(nil), e.client(nil), e.client(nil)
	l, err := dispatcher.Lease(ctx, "job", sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	got := make(chan *sentinel.Lease, 1)
	go func() {
		w, err := waiter.Lease(ctx, "job", sentinel.WithWait())
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	waitFor(t, 20*time.Second, "the waiter to register", func() bool {
		return e.count("lease_waiters", "key = 'job'") == 1
	})
	h, err := l.Detach()
	require.NoError(t, err)
	adopted, err := worker.AdoptHandle(ctx, h, sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	select {
	case w := <-got:
		t.Fatalf("the waiter was granted the key (token %d) while the worker holds it", w.Token())
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	require.NoError(t, adopted.Release(ctx))
	select {
	case w := <-got:
		require.NotNil(t, w)
		require.Greater(t, w.Token(), adopted.Token())
		t.Logf("the waiter got the key %s after the worker's release", time.Since(released))
		require.NoError(t, w.Release(ctx))
	case <-time.After(20 * time.Second):
		t.Fatal("the worker's release did not hand the key to the waiter (its TTL is a minute)")
	}
}
