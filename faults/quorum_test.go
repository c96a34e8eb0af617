package faults

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Scenario: more than one standby, the primary and a standby crashed
// together (TestPatroniQuorum). Three Patroni nodes with
// synchronous_mode: true and synchronous_node_count: 1: Patroni 3.0.2
// names one standby in synchronous_standby_names (PostgreSQL's FIRST 1:
// every commit waits for that standby's flush) and records it in etcd's
// /sync key; the other standby replicates asynchronously. Patroni 3.0.2
// has no quorum commit (ANY n): that is synchronous_mode: quorum, Patroni
// 4.0; and with ANY 1 of 2 a crash of the primary and the one standby that
// acknowledged a commit could lose it anyway (the survivor need not have
// it). What Patroni 3.0.2 gives instead: only a node in /sync may be
// promoted.
//
// Rounds alternate:
//
//   - crash+async: the primary and the asynchronous standby are crashed
//     together (SIGKILL of both, at the same moment); the synchronous
//     standby is promoted after the leader key's TTL;
//   - crash+sync: the primary and the synchronous standby are crashed
//     together; the survivor is asynchronous, and Patroni must not promote
//     it (it may lack commits the primary acknowledged): writes are
//     unavailable until a crashed node is back. The round waits 2 TTLs,
//     checks that no node was promoted, then starts both crashed nodes;
//     one of them (each has every acknowledged commit) becomes primary.
//
// Both crashed nodes are then started again and rejoin (crash recovery,
// pg_rewind). With synchronous_node_count: 2 (the long profile's second
// run, TestPatroniQuorumBothSync) both standbys are synchronous (FIRST 2:
// every commit waits for both) and a crash of the primary and either
// standby leaves a synchronous survivor, which is promoted.
//
// The workloads and checks are the failover scenario's: 0 acknowledged
// rows lost, no token regression, Once at most once, the lease, election
// and queue histories.

// quorumPlan picks, for a crash+sync or crash+async round, the standby to
// crash with the primary and the node expected to be promoted (a
// synchronous standby that survives; nil when none does).
func (pc *patroniCluster) quorumPlan(primary *patroniNode, kind string) (next *patroniNode, alsoDown []*patroniNode) {
	pc.t.Helper()
	var syncs, asyncs []*patroniNode
	for _, n := range pc.nodes {
		if n == primary {
			continue
		}
		if pc.role(n, "sync") {
			syncs = append(syncs, n)
		} else {
			asyncs = append(asyncs, n)
		}
	}
	switch {
	case kind == "crash+sync" && len(syncs) > 0:
		alsoDown = syncs[:1]
		if len(syncs) > 1 {
			next = syncs[1]
		}
	case kind == "crash+async" && len(asyncs) > 0 && len(syncs) > 0:
		alsoDown, next = asyncs[:1], syncs[0]
	default:
		pc.t.Fatalf("%s: no standby of that kind (synchronous %d, asynchronous %d)", kind, len(syncs), len(asyncs))
	}
	return next, alsoDown
}

// crashTogether crashes the nodes at the same moment.
func (pc *patroniCluster) crashTogether(nodes []*patroniNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); pc.crash(n) }()
	}
	wg.Wait()
}

// noPromotionThenRestart handles a round whose synchronous standby went
// down with the primary: for 2 TTLs no node may be promoted; then the
// crashed nodes are started again, and the one Patroni promotes is
// returned.
func (pc *patroniCluster) noPromotionThenRestart(rf *roundFacts, t0 time.Time, crashed []*patroniNode) *patroniNode {
	pc.t.Helper()
	for time.Since(t0) < 2*patroniTTL*time.Second {
		if p := pc.primary(); p != nil {
			rf.PromotedTooEarly = true
			pc.t.Logf("%s was promoted with no synchronous standby alive", p.name)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rf.UnpromotedFor = time.Since(t0).Milliseconds()
	rf.RestartedMs = rf.UnpromotedFor
	for _, n := range crashed {
		if n.proc == nil {
			pc.startNode(n)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if p := pc.primary(); p != nil {
			return p
		}
		time.Sleep(50 * time.Millisecond)
	}
	pc.t.Fatalf("no primary within 90s of restarting the crashed nodes; see %s", pc.dir)
	return nil
}

// quorumRounds is the number of double crashes per profile.
func quorumRounds() int {
	if prof().Name == "long" {
		return 10
	}
	return 2
}

func quorumTest(t *testing.T, syncCount int, kinds []string) {
	failoverGate(t)
	res := runFailover(t, failoverOptions{sync: true, rounds: quorumRounds(), kinds: kinds, nodes: 3, syncCount: syncCount})
	res.facts["nodes"], res.facts["synchronous_node_count"] = 3, syncCount
	report(t, fmt.Sprintf("patroni-quorum-sync%d", syncCount), res.facts)
	for _, rf := range res.rounds {
		if rf.PromotedTooEarly {
			res.v.add("%s: an asynchronous standby was promoted while no synchronous standby was alive", rf.Kind)
		}
	}
	res.v.require(t)
	if len(res.rounds) < quorumRounds() {
		t.Fatalf("%d rounds, want %d", len(res.rounds), quorumRounds())
	}
}

// Three nodes, one synchronous standby: a crash of the primary with
// either standby loses no acknowledged write; with the synchronous one,
// Patroni does not promote the asynchronous survivor.
func TestPatroniQuorum(t *testing.T) {
	quorumTest(t, 1, []string{"crash+async", "crash+sync"})
}

// Three nodes, both standbys synchronous (synchronous_node_count: 2): a
// crash of the primary with either standby leaves a synchronous standby,
// which is promoted; nothing acknowledged is lost. Long profile only (or
// SENTINEL_FAULTS_PATRONI=quorum2).
func TestPatroniQuorumBothSync(t *testing.T) {
	failoverGate(t)
	if m := os.Getenv(failoverEnv); prof().Name != "long" && m != "quorum2" {
		t.Skipf("part of the long profile (or %s=quorum2)", failoverEnv)
	}
	quorumTest(t, 2, []string{"crash+sync"})
}
