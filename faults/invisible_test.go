package faults

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// What a cancelled synchronous-replication wait does to a grant and a
// claim (Patroni's docs call it an "invisible commit"). With synchronous
// replication a commit is flushed locally, then waits for the standby's
// acknowledgement before it becomes visible and is reported. If that wait
// is cancelled (pg_cancel_backend, a driver sending a cancel request, a
// statement_timeout does not: it is disarmed before the commit), PostgreSQL
// ends the wait with a WARNING, makes the commit visible locally and
// reports success: a replication-less commit the client cannot tell from a
// replicated one unless it reads the warning. A failover then loses it.
//
// The test stops the standby's WAL receiver (SIGSTOP), so every commit on
// the primary waits, and shows:
//
//  1. pgx's default reaction to a context that ends (it closes the
//     connection, it sends no cancel request) leaves the wait in place: the
//     call fails, nobody sees the grant;
//  2. a cancelled wait makes a lease grant and a Once claim succeed and
//     become visible to other clients on the primary; Once runs fn;
//  3. after a crash of the primary, the new primary has neither: the key
//     is free again (a second holder, with a token that may equal the
//     first one's) and Once runs fn a second time.
func TestPatroniCancelledSyncWait(t *testing.T) {
	failoverGate(t)
	ctx := ctxT(t, 5*time.Minute)
	pc := startPatroni(t, true)
	admin := newPool(t, pc.dsn(), nil)
	setupSchema(t, admin)
	primary := pc.primary()
	require.NotNil(t, primary)
	standby := pc.other(primary)
	direct := newPool(t, pc.nodeURL(primary), nil) // this node only

	var notices []string
	var noticesMu sync.Mutex
	pool := newPool(t, pc.dsn(), func(c *pgxpool.Config) {
		c.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			noticesMu.Lock()
			notices = append(notices, n.Severity+": "+n.Message+" "+n.Detail)
			noticesMu.Unlock()
		}
	})
	client := newClient(t, pool, sentinel.Config{DefaultTTL: time.Minute, Owner: "a"})
	other := newClient(t, admin, sentinel.Config{DefaultTTL: time.Minute, Owner: "b"})

	// Freeze the standby's WAL receiver: commits on the primary wait.
	pm := postmasterPID(standby)
	require.NotZero(t, pm)
	var receiver int
	for _, pid := range childrenOf(pm) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); strings.Contains(string(b), "walreceiver") {
			receiver = pid
		}
	}
	require.NotZero(t, receiver, "no walreceiver under %s's postmaster", standby.name)
	require.NoError(t, syscall.Kill(receiver, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(receiver, syscall.SIGCONT) })

	waiting := func() []int32 {
		rows, err := direct.Query(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity WHERE wait_event = 'SyncRep'`)
		require.NoError(t, err)
		var pids []int32
		for rows.Next() {
			var p int32
			require.NoError(t, rows.Scan(&p))
			pids = append(pids, p)
		}
		require.NoError(t, rows.Err())
		return pids
	}

	// 1. A context that ends while the grant waits: pgx closes the
	// connection; the wait goes on; nobody sees the grant.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := client.Lease(cctx, "ctx-ended")
	cancel()
	require.Error(t, err, "a grant cannot be acknowledged while the standby is frozen")
	abandoned := waiting()
	require.NotEmpty(t, abandoned, "the abandoned commit should still wait for the standby")
	var visible bool
	require.NoError(t, direct.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM sentinel.leases WHERE key = 'ctx-ended')`).Scan(&visible))
	require.False(t, visible, "a commit still waiting for the standby must not be visible")
	t.Logf("1: Lease with a context that ended during the wait: %v; the commit still waits and is invisible", err)

	// 2. A cancelled wait: the grant and the claim succeed, visible on the
	// primary without being replicated.
	type leaseRes struct {
		l   *sentinel.Lease
		err error
	}
	lc := make(chan leaseRes, 1)
	go func() {
		l, err := client.Lease(ctx, "cancelled")
		lc <- leaseRes{l, err}
	}()
	var fnRuns atomic.Int32
	oc := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, client, "cancelled-once", func(context.Context) (string, error) {
			fnRuns.Add(1)
			return "done", nil
		})
		oc <- err
	}()
	var lr leaseRes
	var onceErr error
	leaseDone, onceDone := false, false
	cancelled := 0
	for deadline := time.Now().Add(30 * time.Second); !leaseDone || !onceDone; {
		require.True(t, time.Now().Before(deadline), "lease/once did not return after their waits were cancelled")
		for _, pid := range waiting() {
			if slices.Contains(abandoned, pid) {
				continue
			}
			var ok bool
			require.NoError(t, direct.QueryRow(ctx, `SELECT pg_catalog.pg_cancel_backend($1)`, pid).Scan(&ok))
			if ok {
				cancelled++
			}
		}
		select {
		case lr = <-lc:
			leaseDone = true
		case onceErr = <-oc:
			onceDone = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	require.NoError(t, lr.err, "the grant whose wait was cancelled")
	require.NoError(t, onceErr, "the Once call whose waits were cancelled")
	require.EqualValues(t, 1, fnRuns.Load())
	noticesMu.Lock()
	t.Logf("2: %d waits cancelled; lease granted with token %d; Once ran fn; warnings: %q", cancelled, lr.l.Token(), notices)
	noticesMu.Unlock()
	_, err = other.Lease(ctx, "cancelled")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired, "the unreplicated grant is visible to other clients on the primary")

	// 3. The primary crashes before the standby got the WAL; the standby is
	// promoted.
	pc.crash(primary)
	require.NoError(t, syscall.Kill(receiver, syscall.SIGCONT))
	pc.waitRole(standby, "primary", time.Minute)
	var l2 *sentinel.Lease
	for deadline := time.Now().Add(30 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		l2, err = other.Lease(actx, "cancelled")
		cancel()
		if err == nil || errors.Is(err, sentinel.ErrNotAcquired) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err, "after the failover the key is free: the grant was lost")
	t.Logf("3: after the failover a second holder got the key with token %d (the first holder still has token %d)", l2.Token(), lr.l.Token())
	_, err = sentinel.Once(ctx, other, "cancelled-once", func(context.Context) (string, error) {
		fnRuns.Add(1)
		return "again", nil
	})
	require.NoError(t, err)
	require.EqualValues(t, 2, fnRuns.Load(), "the claim was lost with the failover: fn ran a second time")
	report(t, "patroni-cancelled-sync-wait", map[string]any{
		"waits_cancelled": cancelled, "first_token": lr.l.Token(), "second_token": l2.Token(),
		"token_reissued": l2.Token() <= lr.l.Token(), "fn_runs": fnRuns.Load(),
	})
}
