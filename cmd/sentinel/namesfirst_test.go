package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A bad name or cursor on the command line (follow --after, a KEY, a
// GROUP, a RESOURCE, an Idempotency-Key, --namespace, --schema, follow
// --type, --operator, --label, --app-version, leases' PREFIX, queue
// follow's --after) is refused, exit 2, before the connection: with the database
// URL broken the operator sees the mistake in the command line, not "bad
// connection string"; with the database down, nothing names a database
// first. Before, each of these went to the library only after connecting.
func TestNamesAndCursorsRefusedBeforeConnecting(t *testing.T) {
	long := strings.Repeat("k", 1100)
	longSchema := strings.Repeat("s", 70)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"follow", "--after", "BADCURSOR", "--count", "1"}, `invalid --after "BADCURSOR": not an event ID`},
		{[]string{"follow", "--after", "5:9", "--count", "1"}, `invalid --after "5:9": malformed range "9"`},
		{[]string{"follow", long, "--count", "1"}, "invalid KEY"},
		{[]string{"follow", "--type", long, "--count", "1"}, "invalid --type"},
		{[]string{"follow", "-n", long, "--count", "1"}, "invalid --namespace"},
		{[]string{"follow", "-n", "a\x01b", "--count", "1"}, "must not contain control characters"},
		{[]string{"status", "--schema", longSchema}, "invalid --schema"},
		{[]string{"migrate", "--schema", longSchema, "--yes"}, "invalid --schema"},
		{[]string{"list", "-n", long}, "invalid --namespace"},
		{[]string{"inspect", long}, "invalid KEY"},
		{[]string{"history", ""}, `invalid KEY "": must not be empty`},
		{[]string{"reconcile", long, "--yes"}, "invalid KEY"},
		{[]string{"reset", long, "--yes"}, "invalid KEY"},
		{[]string{"force-complete", long, "1", "--yes"}, "invalid KEY"},
		{[]string{"set-result", long, "1", "--yes"}, "invalid KEY"},
		{[]string{"lock", long, "--", "true"}, "invalid KEY"},
		{[]string{"leader", long}, "invalid GROUP"},
		{[]string{"members", ""}, "invalid GROUP"},
		{[]string{"observe", long, "--count", "1"}, "invalid GROUP"},
		{[]string{"elect", long, "--", "true"}, "invalid GROUP"},
		{[]string{"queue", "status", long}, "invalid RESOURCE"},
		{[]string{"queue", "follow", long, "--count", "1"}, "invalid RESOURCE"},
		{[]string{"queue", "reset", long}, "invalid RESOURCE"},
		{[]string{"queue", "lock", "printer", long, "--", "true"}, "invalid RESOURCE"},
		{[]string{"leases", "-n", long}, "invalid --namespace"},
		{[]string{"idempotency", "inspect", long}, "invalid KEY"},
		{[]string{"idempotency", "resolve", long, "--refused", "--yes"}, "invalid KEY"},
		{[]string{"idempotency", "inspect", "k", "--scope", "a\xffb"}, "invalid KEY"},
		{[]string{"status", "--operator", long}, "invalid --operator"},
		{[]string{"queue", "lock", "printer", "--label", "a\xffb", "--", "true"}, "invalid --label"},
		{[]string{"queue", "lock", "printer", "--label", long, "--", "true"}, "invalid --label"},
		{[]string{"elect", "g1", "--app-version", "a\xffb", "--", "true"}, "invalid --app-version"},
		{[]string{"leases", "a\xffb"}, "invalid PREFIX"},
		{[]string{"queue", "follow", "--after", "-5", "--count", "1"}, "--after -5: give an event ID"},
	}
	for _, url := range []string{
		"postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2", // nothing listens
		"postgres://u:%zz@127.0.0.1:1/db",                            // not even a URL
	} {
		for _, tc := range cases {
			r := runBin(t, []string{"DATABASE_URL=" + url}, nil, tc.args...)
			name := strings.Join(tc.args, " ")
			if len(name) > 80 {
				name = name[:80]
			}
			requireCode(t, r, exitUsage)
			require.Contains(t, r.stderr, tc.want, "%s", name)
			require.NotContains(t, r.stderr, `database "`, "%s: named a database before refusing the command line", name)
			require.NotContains(t, r.stderr, "connection string", "%s", name)
			require.NotContains(t, r.stderr, "connect", "%s", name)
			require.NotContains(t, r.stderr, "following", "%s: said it follows, then refused", name)
			require.NotContains(t, r.stderr, "warning", "%s: warned of a type, then refused", name)
			require.Empty(t, r.stdout, "%s", name)
		}
	}
}
