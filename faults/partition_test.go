package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario: a primary cut off alive (TestPatroniPartition). Every link of
// each Patroni node to the rest of the cluster runs through a netfault
// proxy (patroniOptions.proxies): its Patroni's etcd traffic, the
// replication and pg_rewind connections other nodes make to its
// PostgreSQL, other nodes' REST calls to it, and, separately, the
// clients' connections. A partition round blackholes the primary's first
// three (nothing is closed; bytes vanish) while its processes run on and
// every client still reaches it. Patroni then does two things on its own:
// the standby's Patroni promotes it once the leader key expires (ttl), and
// the old primary's Patroni, unable to reach etcd, demotes it (a fast
// shutdown, then a read-only restart) after about loop_wait +
// retry_timeout. With synchronous replication the old primary cannot
// acknowledge a commit after the cut: its standby stopped acknowledging,
// and Patroni changes synchronous_standby_names only after it has written
// the change to etcd, which it cannot reach. The round heals the partition
// after 2 TTLs, once every client made progress on the new primary: the
// old primary's Patroni finds the new leader, rewinds its PostgreSQL
// (use_pg_rewind) and rejoins as the synchronous standby.
//
// The workloads and checks are the failover scenario's (runFailover), and
// besides: the probe writers record which node acknowledged each commit
// (all commits the old primary acknowledged after the cut must survive:
// there must be none that were not replicated), and every completion a
// Once call was replayed must be the key's completion at the end (a
// completion read from a primary that the failover discarded would not
// be).

// partitionWatch follows the cut-off old primary during a partition: when
// its Patroni demoted it, and whether it kept serving connections.
type partitionWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	demoted   time.Duration
	served    time.Duration
	primaryTo time.Duration // the last time it answered as a primary (not in recovery)
	readOnly  bool
}

func watchPartitioned(pc *patroniCluster, old *patroniNode, t0 time.Time) *partitionWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &partitionWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			primary := pc.role(old, "primary")
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			var inRecovery, ok bool
			if conn, err := pgx.Connect(cctx, pc.nodeURL(old)); err == nil {
				ok = conn.QueryRow(cctx, `SELECT pg_catalog.pg_is_in_recovery()`).Scan(&inRecovery) == nil
				_ = conn.Close(context.Background())
			}
			ccancel()
			w.mu.Lock()
			if !primary && w.demoted == 0 {
				w.demoted = time.Since(t0)
			}
			if ok {
				w.served = time.Since(t0)
				w.readOnly = w.readOnly || inRecovery
				if !inRecovery {
					w.primaryTo = time.Since(t0)
				}
			}
			w.mu.Unlock()
			_ = sleepCtx(ctx, 50*time.Millisecond)
		}
	}()
	return w
}

func (w *partitionWatch) stop(rf *roundFacts) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	rf.DemotedMs, rf.OldServedMs, rf.OldReadOnly = w.demoted.Milliseconds(), w.served.Milliseconds(), w.readOnly
	rf.OldPrimaryUntilMs = w.primaryTo.Milliseconds()
}

// partitionRounds is the number of partitions per profile.
func partitionRounds() int {
	if prof().Name == "long" {
		return 10
	}
	return 2
}

// A primary cut off alive loses nothing and duplicates nothing: with
// synchronous replication it acknowledges no commit after the cut; its
// Patroni demotes it; the standby is promoted; clients move; after the
// partition heals the old primary rejoins as a standby (pg_rewind) without
// resurrecting anything.
func TestPatroniPartition(t *testing.T) {
	failoverGate(t)
	res := runFailover(t, failoverOptions{sync: true, rounds: partitionRounds(), kinds: []string{"partition"}, proxies: true,
		onceTimeout: 3 * time.Second})
	report(t, "patroni-partition", res.facts)
	res.v.require(t)
	for _, rf := range res.rounds {
		if rf.DemotedMs == 0 {
			t.Errorf("partition %s -> %s: the old primary was never demoted while cut off", rf.From, rf.To)
		}
		if rf.OldServedMs == 0 {
			t.Errorf("partition %s -> %s: the old primary never accepted a connection while cut off: the round did not test a primary cut off alive", rf.From, rf.To)
		}
	}
	if len(res.rounds) < partitionRounds() {
		t.Fatalf("%d partitions, want %d", len(res.rounds), partitionRounds())
	}
}

// patroniEvents returns the lines of node n's Patroni log, and of its
// PostgreSQL's log (patroni.stdout), logged at or after since that say what
// happened to the node (demotion, promotion, DCS trouble, shutdown,
// rewind, rejoin), each prefixed with its offset from since. Patroni logs
// "2006-01-02 15:04:05,000 LEVEL: message" in local time, PostgreSQL
// "2006-01-02 15:04:05.000 UTC [pid] LEVEL:  message".
func patroniEvents(n *patroniNode, since time.Time) []string {
	keys := []string{"demot", "Demot", "DCS", "promot", "rewind", "Lost lock", "acquired session lock", "following a different leader",
		"no action", "starting as a secondary", "synchronous standby", "Synchronous standby",
		"shutdown request", "database system is shut down", "ready to accept", "terminating connection", "canceling the wait"}
	var out []string
	seen := map[string]bool{}
	for _, src := range []struct{ file, layout string }{
		{filepath.Join(n.dir, "log", "patroni.log"), "2006-01-02 15:04:05,000"},
		{filepath.Join(n.dir, "patroni.stdout"), "2006-01-02 15:04:05.000 MST"},
	} {
		b, err := os.ReadFile(src.file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if len(line) <= len(src.layout) {
				continue
			}
			at, err := time.ParseInLocation(src.layout, line[:len(src.layout)], time.Local)
			if err != nil || at.Before(since.Truncate(time.Millisecond)) {
				continue
			}
			msg := strings.TrimSpace(line[len(src.layout):])
			if i := strings.Index(msg, ": "); i >= 0 {
				msg = strings.TrimSpace(msg[i+2:])
			}
			match := false
			for _, k := range keys {
				match = match || strings.Contains(msg, k)
			}
			// Patroni repeats its loop's verdict every loop_wait, and every
			// session ends with the same words: keep the first.
			if !match || seen[msg] {
				continue
			}
			seen[msg] = true
			out = append(out, fmt.Sprintf("+%.1fs %s: %s", at.Sub(since).Seconds(), n.name, msg))
		}
	}
	return out
}

// eventOffset reads the "+1.2s" prefix of a patroniEvents line.
func eventOffset(line string) float64 {
	var f float64
	_, _ = fmt.Sscanf(line, "+%fs", &f)
	return f
}

// resurrected counts the rows a rejoined node has that the primary does
// not: rows the old primary wrote after it was cut off and pg_rewind should
// have taken back. Insert-only tables (the probe writers' rows, the Once
// effects) are read on the rejoined node first and on the primary after,
// so the primary's answer is the later one and a row on the node but not
// on the primary was never the cluster's.
func (pc *patroniCluster) resurrected(ctx context.Context, primary, rejoined *patroniNode) (int, error) {
	read := func(n *patroniNode) (map[string]bool, error) {
		conn, err := pgx.Connect(ctx, pc.nodeURL(n))
		if err != nil {
			return nil, err
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, `SELECT 'acked/' || writer || '/' || n FROM acked
			UNION ALL SELECT 'effect/' || id FROM side_effects`)
		if err != nil {
			return nil, err
		}
		keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
		out := make(map[string]bool, len(keys))
		for _, k := range keys {
			out[k] = true
		}
		return out, err
	}
	there, err := read(rejoined)
	if err != nil {
		return 0, err
	}
	here, err := read(primary)
	if err != nil {
		return 0, err
	}
	n := 0
	for k := range there {
		if !here[k] {
			n++
		}
	}
	return n, nil
}
