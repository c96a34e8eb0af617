package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An invalid GROUP is refused as the group the operator typed (not as a
// "key", the library's word for the names it checks), with what a group
// may be; nothing runs.
func TestInvalidGroupIsNamedAsTheGroup(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	long := strings.Repeat("g", sentinel.MaxKeyLen+1)
	for _, args := range [][]string{
		{"elect", "", "--", "touch", "/nonexistent/ran"},
		{"elect", long, "--", "true"},
		{"leader", ""},
		{"members", long},
		{"observe", "", "--count", "1"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitUsage)
		require.NotContains(t, r.stderr, "invalid key", "%v", args[0])
		require.Contains(t, r.stderr, "invalid GROUP ", "%v", args[0])
		require.Contains(t, r.stderr, "a GROUP is 1 to 1024 bytes", "%v", args[0])
	}
	r := e.run("elect", "", "--", "true")
	require.Contains(t, r.stderr, `invalid GROUP "": must not be empty`)
	r = e.run("elect", long, "--", "true")
	require.Contains(t, r.stderr, `invalid GROUP "gggg`)
	require.Contains(t, r.stderr, "is 1025 bytes, the limit is 1024")
}
