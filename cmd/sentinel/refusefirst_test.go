package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad command line of lock, elect or queue lock (nothing after --, words
// without --, a negative duration, a TTL below MinTTL, an unknown
// --contain) is refused, exit 2, before anything about the database: with
// the database down or its URL broken the refusal is the same and
// immediate, and stderr names no database the command never acted on.
func TestLockElectQueueLockRefuseBeforeConnecting(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lock", "k1", "--"}, "nothing after --"},
		{[]string{"elect", "g1", "--"}, "nothing after --"},
		{[]string{"queue", "lock", "printer", "--"}, "nothing after --"},
		{[]string{"lock", "k1", "ls"}, "lock runs a command only after --"},
		{[]string{"elect", "g1", "ls"}, "elect runs a command only after --"},
		{[]string{"lock", "k1", "--kill-after", "-1s", "--", "true"}, "give a duration of 0 or more"},
		{[]string{"lock", "k1", "--timeout", "-1s", "--", "true"}, "give a duration of 0 (wait forever) or more"},
		{[]string{"queue", "lock", "printer", "--timeout", "-1s", "--", "true"}, "give a duration of 0 (wait forever) or more"},
		{[]string{"elect", "g1", "--kill-after", "-1s", "--", "true"}, "give a duration of 0 or more"},
		{[]string{"lock", "k1", "--contain", "nonsense", "--", "true"}, "--contain"},
		{[]string{"lock", "k1", "--ttl", "1ms", "--", "true"}, "invalid TTL"},
		{[]string{"queue", "lock", "printer", "--ttl", "-1s", "--", "true"}, "invalid TTL"},
		{[]string{"elect", "g1", "--ttl", "-1s", "--", "true"}, "invalid TTL"},
	}
	for _, url := range []string{
		"postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", // nothing listens
		"postgres://u:%zz@127.0.0.1:1/db",                            // not even a URL
	} {
		for _, tc := range cases {
			r := runBin(t, []string{"DATABASE_URL=" + url}, nil, tc.args...)
			requireCode(t, r, exitUsage)
			require.Contains(t, r.stderr, tc.want, "%v", tc.args)
			require.NotContains(t, r.stderr, `sentinel: database "`, "%v: named a database before refusing the command line", tc.args)
			require.NotContains(t, r.stderr, "connection string", "%v", tc.args)
		}
	}
}

// Every other command's flags are checked before the connection too: a
// bad value exits 2 with the flag's own refusal, at once, with the
// database down or its URL broken, and names no database (before, prune,
// list, status, history, reconcile, serve and the rest connected first:
// "bad connection string", or the database named and then the refusal).
func TestFlagValuesRefusedBeforeConnecting(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"prune", "--yes"}, "--older-than is required"},
		{[]string{"prune", "--older-than", "-1h", "--yes"}, "give 1h0m0s (sentinel.MinRetention) or more"},
		{[]string{"prune", "--older-than", "30m", "--yes"}, "MinRetention"},
		{[]string{"prune", "--older-than", "168h", "-n", "x", "--all-namespaces", "--yes"}, "give --namespace or --all-namespaces, not both"},
		{[]string{"list", "--limit", "0"}, "--limit must be 1..1000"},
		{[]string{"list", "--limit", "-1"}, "--limit must be 1..1000"},
		{[]string{"list", "--state", "bogus"}, `--state "bogus"`},
		{[]string{"list", "--result-lost", "--uncertain"}, "not both"},
		{[]string{"list", "--rerun-pending", "--uncertain"}, "give --rerun-pending (a re-run left) or --uncertain (none left), not both"},
		{[]string{"list", "--rerun-pending", "--result-lost"}, "not both"},
		{[]string{"list", "--rerun-pending", "--state", "completed"}, "--rerun-pending lists executing executions: not with --state completed"},
		{[]string{"list", "--updated-before", "yesterday"}, "want an RFC 3339 time"},
		{[]string{"list", "--older-than", "1h", "--updated-before", "2026-11-01T00:00:00Z"}, "give --older-than or --updated-before, not both"},
		{[]string{"list", "-n", "x", "-A"}, "give --namespace or --all-namespaces, not both"},
		{[]string{"status", "--limit", "0"}, "--limit must be 1..1000"},
		{[]string{"status", "-n", "x", "-A"}, "give --namespace or --all-namespaces, not both"},
		{[]string{"history", "k", "--limit", "-1"}, "--limit must be 0 (all) or more"},
		{[]string{"history", "k", "--last-run", "--limit", "3"}, "exclude each other"},
		{[]string{"reconcile", "k", "--token", "-1", "--yes"}, "--token -1: give the fencing token inspect showed"},
		{[]string{"reconcile", "k", "--token", "0", "--yes"}, "--token 0: give the fencing token inspect showed"},
		{[]string{"reset", "k", "--token", "-1", "--yes"}, "--token -1"},
		{[]string{"force-complete", "k", "notjson", "--yes"}, "VALUE must be a JSON document"},
		{[]string{"force-complete", "k", "1", "--token", "-2", "--yes"}, "--token -2"},
		{[]string{"set-result", "k", "notjson", "--yes"}, "VALUE must be a JSON document"},
		{[]string{"idempotency", "resolve", "k", "--status", "999", "--body", "x", "--yes"}, "--status 999"},
		{[]string{"idempotency", "resolve", "k", "--refused", "--status", "200", "--yes"}, "not both"},
		{[]string{"idempotency", "resolve", "k", "--status", "200", "--yes"}, "give --status and --body"},
		{[]string{"idempotency", "resolve", "k", "--status", "200", "--body", "x", "--header", "bad", "--yes"}, `--header "bad"`},
		{[]string{"idempotency", "resolve", "k", "--status", "200", "--body", "@/nonexistent/body", "--yes"}, "--body @/nonexistent/body"},
		{[]string{"idempotency", "resolve", "k", "--refused", "--token", "0", "--yes"}, "--token 0"},
		{[]string{"idempotency", "list", "-n", "x", "-A"}, "not both"},
		{[]string{"idempotency", "list", "--state", "done"}, `--state "done"`},
		{[]string{"idempotency", "list", "--state", "completed", "--uncertain"}, "not both"},
		{[]string{"leases", "--limit", "-1"}, "--limit -1: give 1 to 100000"},
		{[]string{"leases", "-n", "x", "-A"}, "not both"},
		{[]string{"elections", "--limit", "200000"}, "--limit 200000: give 1 to 100000"},
		{[]string{"queue", "status", "-n", "x", "-A"}, "not both"},
		{[]string{"queue", "reset", "-n", "x", "-A"}, "not both"},
		{[]string{"follow", "-n", "x", "-A", "--count", "1"}, "not both"},
		{[]string{"serve", "--addr", "10.1.2.3:8380", "--read-only"}, "is not a loopback address"},
		{[]string{"serve", "--addr", "127.0.0.1:0"}, "actions need an operator token"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--operator-token", "correct-horse-battery-staple-2024"}, "looks made, not drawn at random"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--operator-token-file", "/nonexistent/token"}, "--operator-token-file"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--read-only", "--allowed-host", "a b"}, `AllowedHosts entry "a b"`},
	}
	for _, url := range []string{
		"postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", // nothing listens
		"postgres://u:%zz@127.0.0.1:1/db",                            // not even a URL
	} {
		for _, tc := range cases {
			r := runBin(t, []string{"DATABASE_URL=" + url}, nil, tc.args...)
			requireCode(t, r, exitUsage)
			require.Contains(t, r.stderr, tc.want, "%v", tc.args)
			require.NotContains(t, r.stderr, `sentinel: database "`, "%v: named a database before refusing the command line", tc.args)
			require.NotContains(t, r.stderr, "connection string", "%v", tc.args)
			require.NotContains(t, r.stderr, "connect", "%v", tc.args)
			require.Empty(t, r.stdout, "%v", tc.args)
		}
	}
}
