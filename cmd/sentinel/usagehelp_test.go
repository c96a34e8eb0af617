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

// A usage error raised by a subcommand's own checks of its command line
// (a missing argument, conflicting flags, a bad value), not by the flag
// parser, printed no help line at all, and the argument count's pointed
// nested commands to another command's help (idempotency inspect to
// 'sentinel inspect --help', queue lock to 'sentinel lock --help'). Each
// now names its own subcommand's help, once, runnable as printed, as a
// flag-parse error does; the exit code stays 2. A command's own exit
// code 2 (lock -- CMD) is no usage error: no help line.
func TestArgumentCheckErrorsNameTheSubcommandsHelp(t *testing.T) {
	e := newEnv(t)
	helpLine := regexp.MustCompile(`'(sentinel[^']*--help)'`)
	for _, c := range []struct {
		args []string
		help string
	}{
		{[]string{"status", "--reconciling-after", "0s"}, "sentinel status --help"},
		{[]string{"status", "--limit", "0"}, "sentinel status --help"},
		{[]string{"list", "--uncertain", "--rerun-pending"}, "sentinel list --help"},
		{[]string{"list", "--state", "bogus"}, "sentinel list --help"},
		{[]string{"inspect"}, "sentinel inspect --help"},
		{[]string{"idempotency", "inspect"}, "sentinel idempotency inspect --help"},
		{[]string{"queue", "lock"}, "sentinel queue lock --help"},
		{[]string{"force-complete", "k1"}, "sentinel force-complete --help"},
	} {
		r := e.run(c.args...)
		requireCode(t, r, exitUsage)
		require.Equal(t, 1, strings.Count(r.stderr, "--help"), "%v: %s", c.args, r.stderr)
		m := helpLine.FindStringSubmatch(r.stderr)
		require.NotNil(t, m, "%v: %s", c.args, r.stderr)
		require.Equal(t, c.help, m[1], "%v: %s", c.args, r.stderr)
		p := runPrinted(t, m[1], "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, "Usage:", "%v", c.args)
	}

	e.migrate()
	r := e.run("lock", "k1", "--", "sh", "-c", "exit 2")
	requireCode(t, r, exitUsage)
	require.NotContains(t, r.stderr, "--help", r.stderr)
}
