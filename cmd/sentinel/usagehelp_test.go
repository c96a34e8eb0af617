package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A usage error in a subcommand names that subcommand's help, once,
// runnable as printed: "Run 'sentinel --help'" lists the commands, not
// the flags of the one the operator got wrong.
func TestUsageErrorNamesTheSubcommandsHelp(t *testing.T) {
	helpLine := regexp.MustCompile(`'(sentinel[^']*--help)'`)
	for _, c := range []struct {
		args []string
		help string
	}{
		{[]string{"list", "--bogus"}, "sentinel list --help"},
		{[]string{"list", "a", "b", "c"}, "sentinel list --help"},
		{[]string{"idempotency", "list", "--bogus"}, "sentinel idempotency list --help"},
		{[]string{"queue", "status", "--nope"}, "sentinel queue status --help"},
		{[]string{"status", "-x"}, "sentinel status --help"},
		{[]string{"no-such-command"}, "sentinel --help"},
	} {
		r := runBin(t, nil, nil, c.args...)
		requireCode(t, r, exitUsage)
		require.Equal(t, 1, strings.Count(r.stderr, "--help"), "%v: %s", c.args, r.stderr)
		m := helpLine.FindStringSubmatch(r.stderr)
		require.NotNil(t, m, "%v: %s", c.args, r.stderr)
		require.Equal(t, c.help, m[1], "%v: %s", c.args, r.stderr)
		p := runPrinted(t, m[1], "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, "Usage:", "%v", c.args)
	}
}
