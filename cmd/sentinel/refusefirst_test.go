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
