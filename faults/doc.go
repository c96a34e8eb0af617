// Package faults is Sentinel's fault-injection suite. It holds tests only:
// they run Once and leases against a throwaway PostgreSQL cluster while
// killing (SIGKILL) and pausing (SIGSTOP) worker processes, restarting the
// server in immediate mode, injecting network latency, resets and a
// blackhole through a TCP proxy, and running behind PgBouncer in
// transaction pooling mode; lease histories are checked with the porcupine
// linearizability checker against a model of a fenced lease.
//
// Opt-in scenarios need root and more: PostgreSQL failover, a primary cut
// off alive and the primary crashed with a standby under Patroni
// (SENTINEL_FAULTS_PATRONI=1; etcd and patroni), and sockets that vanish
// with real packet drops between network namespaces the tests make
// (SENTINEL_FAULTS_BLACKHOLE=1; iproute2).
//
// The default (CI) profile runs with `go test ./...`. The long profile:
//
//	go test -race -timeout 60m ./faults -long
//	SENTINEL_FAULTS=long go test -race -timeout 60m ./faults
//
// docs/reliability.md describes each scenario and its results.
package faults
