package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/lockmodel"
)

// Scenario 2: a lease holder process is SIGSTOPped past its TTL, another
// client acquires the lease, the holder is SIGCONTed. Every write the stale
// holder then guards with its token must be refused, and its Done must
// have closed.

const pauseTTL = time.Second

// guardedWrite writes one row to guarded_log inside a transaction that
// first checks the token with VerifyToken. between, if set, runs after the
// check and before the write. It returns "ok", "refused" (stale token) or
// "error".
func guardedWrite(ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, key string, token int64, writer string, between func()) string {
	return guardedLogWrite(ctx, pool, func(tx pgx.Tx) error { return c.VerifyToken(ctx, tx, key, token) }, key, token, writer, between)
}

// guardedLogWrite is guardedWrite with the check (VerifyToken,
// VerifyExecutionToken, VerifyTerm) given by verify.
func guardedLogWrite(ctx context.Context, pool *pgxpool.Pool, verify func(pgx.Tx) error, key string, token int64, writer string, between func()) string {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "error"
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := verify(tx); err != nil {
		if errors.Is(err, sentinel.ErrStaleToken) {
			return "refused"
		}
		return "error"
	}
	if between != nil {
		between()
	}
	if _, err := tx.Exec(ctx, `INSERT INTO guarded_log (key, token, writer) VALUES ($1, $2, $3)`, key, token, writer); err != nil {
		return "error"
	}
	if err := tx.Commit(ctx); err != nil {
		return "error"
	}
	return "ok"
}

// fencedWrite updates the fenced resource if no larger token has written
// it: "ok", "refused" or "error". The guard is fence_token <= $token, not
// <, so a holder may write more than once under its token; a stale token
// is refused either way once a newer holder has written.
func fencedWrite(ctx context.Context, pool *pgxpool.Pool, key string, token int64, writer string) string {
	tag, err := pool.Exec(ctx, `UPDATE fenced SET fence_token = $2, writer = $3, writes = writes + 1
		WHERE key = $1 AND fence_token <= $2`, key, token, writer)
	switch {
	case err != nil:
		return "error"
	case tag.RowsAffected() == 1:
		return "ok"
	default:
		return "refused"
	}
}

// holderWorker acquires SF_KEY, writes three times, then pauses at a known
// point (SF_PAUSE "idle": between writes; "intx": inside a guarded write,
// after VerifyToken) and waits for "go" on stdin; meanwhile the driver
// stops it. After "go" it reports whether Done had closed and, after
// "post", attempts ten more guarded writes ignoring Done, and releases.
// Output lines:
//
//	acquired TOKEN CALL RET
//	write I pre|post DONE VERIFY FENCE CALL RET BELIEF
//	idle | in-tx
//	intx-write RESULT CALL RET              (the write paused inside its tx)
//	resume DONE
//	done-wait MILLISECONDS
//	done lost|released|other DEADLINE SEEN
//	release ok|lost|error CALL RET
//
// DONE is 1 when Done was closed before the write; BELIEF is 1 when the
// holder still trusted its lease then. Times are wall-clock nanoseconds
// (the one clock both processes read), for the history checker.
func holderWorker(cmds <-chan string) error {
	ctx := context.Background()
	key, name := os.Getenv("SF_KEY"), os.Getenv("SF_NAME")
	ttl := envDuration("SF_TTL", pauseTTL)
	pool, err := pgxpool.New(ctx, os.Getenv("SF_DB"))
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := sentinel.New(pool, &sentinel.Config{DefaultTTL: ttl, Owner: fmt.Sprintf("%s-pid%d", name, os.Getpid())})
	if err != nil {
		return err
	}
	defer c.Close()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	call := wall()
	l, err := c.Lease(actx, key, sentinel.WithWait())
	cancel()
	if err != nil {
		return err
	}
	tok := l.Token()
	emit("acquired %d %d %d", tok, call, wall())
	go func() {
		<-l.Done()
		kind := "other"
		switch err := l.Err(); {
		case errors.Is(err, sentinel.ErrLeaseLost):
			kind = "lost"
		case errors.Is(err, sentinel.ErrReleased):
			kind = "released"
		}
		emit("done %s %d %d", kind, l.Deadline().UnixNano(), wall())
	}()
	closed := func() int {
		select {
		case <-l.Done():
			return 1
		default:
			return 0
		}
	}
	await := func(want string) {
		for cmd := range cmds {
			if cmd == want {
				return
			}
		}
	}
	// write reports one guarded write (and a fenced one) with its call and
	// return times, and whether the holder still trusted its lease when it
	// began (before its deadline, Done open).
	write := func(i int, phase string) {
		belief := 0
		if now := time.Now(); now.Before(l.Deadline()) && l.Err() == nil {
			belief = 1
		}
		done, call := closed(), wall()
		g := guardedWrite(ctx, pool, c, key, tok, name, nil)
		ret := wall()
		emit("write %d %s %d %s %s %d %d %d", i, phase, done, g, fencedWrite(ctx, pool, key, tok, name), call, ret, belief)
	}
	for i := range 3 {
		write(i, "pre")
		time.Sleep(10 * time.Millisecond)
	}
	if os.Getenv("SF_PAUSE") == "intx" {
		call := wall()
		res := guardedWrite(ctx, pool, c, key, tok, name, func() {
			emit("in-tx")
			await("go")
		})
		emit("intx-write %s %d %d", res, call, wall())
	} else {
		emit("idle")
		await("go")
	}
	emit("resume %d", closed())
	resumed := time.Now()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
	}
	emit("done-wait %d", time.Since(resumed).Milliseconds())
	await("post") // the new holder has written by now
	for i := 3; i < 13; i++ {
		write(i, "post")
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	call = wall()
	err = l.Release(rctx)
	ret := wall()
	switch {
	case err == nil:
		emit("release ok %d %d", call, ret)
	case errors.Is(err, sentinel.ErrLeaseLost):
		emit("release lost %d %d", call, ret)
	default:
		emit("release error %d %d", call, ret)
	}
	return nil
}

// waitStopped polls until the process is in the stopped state.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := processState(pid)
		require.NoError(t, err)
		if st == 'T' || st == 't' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped (state %c)", pid, st)
		}
		time.Sleep(time.Millisecond)
	}
}

// pauseStats accumulates scenario 2's numbers.
type pauseStats struct {
	trials, pauses, staleWrites, staleRefused int
	doneBeforeStaleWrite                      int
	maxDoneWaitMs                             int
	acquireBlockedMs                          []int64
	intxWritesCommitted                       int
	grantsBornExpired                         int

	mu  sync.Mutex
	ops []porcupine.Operation // both processes' lease operations, wall-clock times
}

// wall is the clock both processes' histories are stamped with: wall-clock
// nanoseconds (CLOCK_REALTIME is shared; Go's monotonic readings are not).
func wall() int64 { return time.Now().UnixNano() }

func (st *pauseStats) op(kind lockmodel.Kind, key string, client int, token int64, call int64, res lockmodel.Result, outToken int64, ret int64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.ops = append(st.ops, porcupine.Operation{ClientId: client,
		Input: lockmodel.Input{Kind: kind, Key: key, Client: client, Token: token}, Call: call,
		Output: lockmodel.Output{Result: res, Token: outToken}, Return: max(ret, call)})
}

// holderLine records the lease operations in one of the holder's lines.
func (st *pauseStats) holderLine(key string, token int64, f []string) {
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	result := func(r string) lockmodel.Result {
		switch r {
		case "ok":
			return lockmodel.OK
		case "refused":
			return lockmodel.Refused
		}
		return lockmodel.Unknown
	}
	switch f[0] {
	case "write": // write I phase DONE VERIFY FENCE CALL RET BELIEF
		if f[8] == "1" {
			st.op(lockmodel.Held, key, 0, token, n(6), lockmodel.OK, 0, n(6))
		}
		st.op(lockmodel.Write, key, 0, token, n(6), result(f[4]), 0, n(7))
	case "intx-write": // intx-write RESULT CALL RET
		st.op(lockmodel.Write, key, 0, token, n(2), result(f[1]), 0, n(3))
	case "done": // done KIND DEADLINE SEEN
		if f[1] == "lost" {
			st.op(lockmodel.Held, key, 0, token, min(n(2), n(3)), lockmodel.OK, 0, n(3))
		}
	case "release": // release RESULT CALL RET; "lost" may or may not have deleted
		st.op(lockmodel.Release, key, 0, token, n(2), result(f[1]), 0, n(3))
	}
}

func TestPausedHolder(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 10*time.Minute)
	cl := startCluster(t, nil)
	pool := newPool(t, cl.URL(), nil)
	setupSchema(t, pool)
	other := newClient(t, pool, sentinel.Config{DefaultTTL: pauseTTL, Owner: "other"})
	var st pauseStats
	var v violations

	for trial := range p.PauseTrials {
		// Every third trial pauses the holder inside its guarded write's
		// transaction, after VerifyToken locked the lease row.
		mode := "idle"
		if trial%3 == 2 {
			mode = "intx"
		}
		t.Run(fmt.Sprintf("trial%d-%s", trial, mode), func(t *testing.T) {
			pausedTrial(t, ctx, cl.URL(), pool, other, trial, mode, &st, &v)
		})
	}
	hist := porcupine.CheckResult("")
	if len(st.ops) > 0 {
		hist = lockmodel.Check(st.ops, 2*time.Minute)
		if hist != porcupine.Ok {
			v.add("paused-holder lease history (%d ops) is %s under the fenced-lease model", len(st.ops), hist)
		}
	}
	v.require(t)
	report(t, "pause", map[string]any{
		"lease_ops_checked": len(st.ops), "porcupine": hist,
		"trials": st.trials, "pauses": st.pauses, "stale_writes_attempted": st.staleWrites,
		"stale_writes_refused": st.staleRefused, "done_closed_before_first_stale_write": st.doneBeforeStaleWrite,
		"max_done_wait_ms": st.maxDoneWaitMs, "intx_acquire_blocked_ms": st.acquireBlockedMs,
		"intx_writes_committed_after_resume": st.intxWritesCommitted, "grants_born_expired": st.grantsBornExpired,
		"violations": v.count(),
	})
}

func pausedTrial(t *testing.T, ctx context.Context, url string, pool *pgxpool.Pool, other *sentinel.Client,
	trial int, mode string, st *pauseStats, v *violations) {
	key := fmt.Sprintf("pause-%d", trial)
	_, err := pool.Exec(ctx, `INSERT INTO fenced (key) VALUES ($1)`, key)
	require.NoError(t, err)
	h := spawn(t, "holder", "holder", []string{"SF_DB=" + url, "SF_KEY=" + key, "SF_NAME=holder",
		"SF_TTL=" + pauseTTL.String(), "SF_PAUSE=" + mode}, nil)
	af := h.expect(t, "acquired", 30*time.Second, nil)
	t1, err := strconv.ParseInt(af[1], 10, 64)
	require.NoError(t, err)
	acall, _ := strconv.ParseInt(af[2], 10, 64)
	aret, _ := strconv.ParseInt(af[3], 10, 64)
	st.op(lockmodel.Acquire, key, 0, 0, acall, lockmodel.OK, t1, aret)
	pausePoint := "idle"
	if mode == "intx" {
		pausePoint = "in-tx"
	}
	h.expect(t, pausePoint, 10*time.Second, func(line string) {
		f := strings.Fields(line)
		st.holderLine(key, t1, f)
		if f[0] == "write" && (f[4] != "ok" || f[5] != "ok") {
			v.add("trial %d: the holder's write before the pause was refused: %s", trial, line)
		}
	})
	require.NoError(t, h.signal(syscall.SIGSTOP))
	waitStopped(t, h.pid)
	stopped := time.Now()
	st.trials++
	st.pauses++

	// Past the TTL another client acquires. In "idle" mode that happens
	// at the holder's expiry. In "intx" mode the holder's open
	// transaction holds the lease row FOR KEY SHARE, so the takeover waits
	// until it ends: measure how long.
	time.Sleep(pauseTTL)
	type grant struct {
		l   *sentinel.Lease
		err error
		at  time.Time
	}
	// acquire is other's non-blocking Lease, recorded.
	acquire := func() (*sentinel.Lease, error) {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		call := wall()
		l, err := other.Lease(actx, key)
		var held *sentinel.HeldError
		switch {
		case err == nil:
			st.op(lockmodel.Acquire, key, 1, 0, call, lockmodel.OK, l.Token(), wall())
		case errors.As(err, &held):
			var tok int64
			if held.Holder != nil {
				tok = held.Holder.Token
			}
			st.op(lockmodel.Acquire, key, 1, 0, call, lockmodel.Refused, tok, wall())
		default:
			st.op(lockmodel.Acquire, key, 1, 0, call, lockmodel.Unknown, 0, wall())
		}
		return l, err
	}
	granted := make(chan grant, 1)
	go func() {
		for {
			l, err := acquire()
			if errors.Is(err, sentinel.ErrNotAcquired) && time.Since(stopped) < 10*time.Second {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			granted <- grant{l, err, time.Now()}
			return
		}
	}()
	var g grant
	if mode == "intx" {
		select {
		case g = <-granted:
			t.Logf("trial %d: the takeover did not wait for the paused transaction", trial)
		case <-time.After(2 * pauseTTL):
		}
		require.NoError(t, h.signal(syscall.SIGCONT))
		require.NoError(t, h.send("go"))
		if g.l == nil {
			g = <-granted
		}
		st.acquireBlockedMs = append(st.acquireBlockedMs, g.at.Sub(stopped.Add(pauseTTL)).Milliseconds())
	} else {
		g = <-granted
	}
	require.NoError(t, g.err)
	l2 := g.l
	if !l2.Deadline().After(time.Now()) {
		// Granted already expired: the expiry counted from before a
		// wait (finding 4, TestGrantAfterALockWaitIsNotBornExpired).
		// Acquire again so the trial can go on.
		st.grantsBornExpired++
		v.add("trial %d: the takeover's lease was granted already expired", trial)
		<-l2.Done()
		l2, err = acquire()
		require.NoError(t, err)
	}
	defer func() {
		call := wall()
		res := lockmodel.OK
		if l2.Release(ctx) != nil {
			res = lockmodel.Unknown
		}
		st.op(lockmodel.Release, key, 1, l2.Token(), call, res, 0, wall())
	}()
	if l2.Token() <= t1 {
		v.add("trial %d: new token %d not larger than the paused holder's %d", trial, l2.Token(), t1)
	}
	wcall := wall()
	if r := guardedWrite(ctx, pool, other, key, l2.Token(), "other", nil); r != "ok" {
		v.add("trial %d: the new holder's guarded write: %s", trial, r)
	} else {
		st.op(lockmodel.Write, key, 1, l2.Token(), wcall, lockmodel.OK, 0, wall())
	}
	if r := fencedWrite(ctx, pool, key, l2.Token(), "other"); r != "ok" {
		v.add("trial %d: the new holder's fenced write: %s", trial, r)
	}
	if mode == "idle" {
		require.NoError(t, h.signal(syscall.SIGCONT))
		require.NoError(t, h.send("go"))
	}
	require.NoError(t, h.send("post"))

	// The stale holder reports.
	var doneKind, releaseRes string
	firstStale := true
	doneWait := -1
	for line := range h.lines {
		f := strings.Fields(line)
		st.holderLine(key, t1, f)
		switch f[0] {
		case "intx-write":
			if f[1] == "ok" {
				st.intxWritesCommitted++
			}
		case "resume":
		case "done-wait":
			doneWait, _ = strconv.Atoi(f[1])
		case "done":
			doneKind = f[1]
		case "release":
			releaseRes = f[1]
		case "write":
			if f[2] != "post" {
				continue
			}
			st.staleWrites += 2
			if firstStale {
				firstStale = false
				if f[3] == "1" {
					st.doneBeforeStaleWrite++
				}
			}
			for _, r := range f[4:6] {
				if r == "refused" {
					st.staleRefused++
				} else {
					v.add("trial %d: stale holder (token %d) write after the takeover: %s (%s)", trial, t1, r, line)
				}
			}
		case "fatal":
			v.add("trial %d: holder failed: %s", trial, line)
		}
	}
	require.Equal(t, 0, h.exitCode(), "holder stderr:\n%s", h.stderr.tail(20))
	if doneKind != "lost" {
		v.add("trial %d: the stale holder's Done reason %q, want lost", trial, doneKind)
	}
	if doneWait < 0 || doneWait > 500 {
		v.add("trial %d: Done closed %d ms after the holder resumed, want promptly", trial, doneWait)
	}
	st.maxDoneWaitMs = max(st.maxDoneWaitMs, doneWait)
	if releaseRes != "lost" {
		v.add("trial %d: the stale holder's Release returned %q, want lost", trial, releaseRes)
	}

	// The database agrees: the new holder still holds the lease (the stale
	// release deleted nothing), every write of the stale token committed
	// before any write of the new one, and the fenced resource holds the
	// new holder's write.
	hold, err := other.Holder(ctx, key)
	require.NoError(t, err)
	if hold.Token != l2.Token() || hold.Owner != "other" {
		v.add("trial %d: holder after the stale release is %s/%d, want other/%d", trial, hold.Owner, hold.Token, l2.Token())
	}
	var maxOld, minNew int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(max(id) FILTER (WHERE token = $2), 0), coalesce(min(id) FILTER (WHERE token = $3), 0)
		FROM guarded_log WHERE key = $1`, key, t1, l2.Token()).Scan(&maxOld, &minNew))
	if minNew == 0 || maxOld > minNew {
		v.add("trial %d: guarded writes out of token order: last of token %d is id %d, first of token %d is id %d", trial, t1, maxOld, l2.Token(), minNew)
	}
	var fence int64
	var writer string
	require.NoError(t, pool.QueryRow(ctx, `SELECT fence_token, writer FROM fenced WHERE key = $1`, key).Scan(&fence, &writer))
	if fence != l2.Token() || writer != "other" {
		v.add("trial %d: fenced resource is %s/%d, want other/%d", trial, writer, fence, l2.Token())
	}
}
