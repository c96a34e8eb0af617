package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Exit 5 covers four cases since status --reconciling-after, but
// `sentinel --help` (and the command's package documentation) still said
// "uncertain, result not stored, rerun pending too long": an operator
// reading what exit 5 means from the help did not learn that a key left
// reconciling pages too. Each case the check pages on is named.
func TestRootHelpNamesEveryExitFiveCase(t *testing.T) {
	r := runBin(t, nil, nil, "--help")
	requireCode(t, r, exitOK)
	m := regexp.MustCompile(`(?s)5 needs an operator \('status --exit-code': (.*?)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	cases := strings.Join(strings.Fields(m[1]), " ")
	for _, c := range []string{"uncertain", "result not stored", "rerun pending too long", "reconciling too long"} {
		require.Contains(t, cases, c)
	}
}
