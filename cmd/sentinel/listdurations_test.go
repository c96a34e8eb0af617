package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// list --older-than and --newer-than with a duration of 0 or less (a
// typo'd "-10m", a script's "${AGE}s" with AGE unset) are refused, exit 2,
// instead of being dropped in silence so that the listing covers every
// execution while the operator believes it filtered them.
func TestListRefusesAgesOfZeroOrLess(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("payments"), "order-1")
	for _, args := range [][]string{
		{"list", "--older-than", "-10m"},
		{"list", "--newer-than", "-1h"},
		{"list", "--newer-than", "0s"},
		{"list", "--older-than", "0", "--json"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "give a duration of more than 0", "%v", args)
		require.NotContains(t, r.stdout, "order-1", "%v", args)
	}
	r := e.run("list", "--newer-than", "1h", "--json")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "order-1")
}
