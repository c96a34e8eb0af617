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

// lock and elect run a command only after "--", as queue lock does (whose
// words before it are all RESOURCEs): words after the KEY or GROUP without
// "--" are refused, exit 2, with the command line that runs them, flags
// kept before "--"; nothing is taken and nothing runs. The printed line
// runs as printed.
func TestCommandWithoutDashIsRefusedWithTheLineToRun(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	dir := t.TempDir()
	ran := dir + "/ran"
	r := e.run("lock", "-n", "jobs", "k1", "--ttl", "5s", "touch", ran)
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "lock runs a command only after --")
	want := "sentinel lock k1 --namespace jobs --ttl 5s --schema " + e.schema + " -- touch " + ran
	require.Contains(t, r.stderr, "\n  "+want+"\n")
	require.NoFileExists(t, ran, "nothing ran")
	r = e.run("leases", "--expired", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no lease was taken")

	r = e.run("elect", "g1", "touch", ran)
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "\n  sentinel elect g1 --schema "+e.schema+" -- touch "+ran+"\n")
	require.NoFileExists(t, ran, "nothing ran")

	// A KEY after a first "--" (one that reads as a flag): the command
	// after a second.
	r = e.run("lock", "--", "-k", "touch", ran)
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "\n  sentinel lock --schema "+e.schema+" -- -k -- touch "+ran+"\n")
	require.NoFileExists(t, ran, "nothing ran")

	// A command with a flag, given without --: the flag is refused as
	// lock's, and the error says where a command goes.
	r = e.run("lock", "k1", "ls", "-l")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "a command to run goes after --: sentinel lock KEY -- CMD [ARGS...]")

	// The printed line, run as printed, runs the command.
	r = runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, strings.Fields(strings.TrimPrefix(want, "sentinel "))...)
	requireCode(t, r, exitOK)
	require.FileExists(t, ran)
}

// A queue RESOURCE that reads as a flag goes after a first "--", with the
// other resources, and the command after a second, as lock takes such a
// KEY: the command runs on turns of both. Given as a flag, the error says
// how; so does the error for no RESOURCE at all.
func TestQueueLockResourceThatReadsAsAFlag(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	r := e.run("queue", "lock", "--", "-tray2", "printer", "--", "sh", "-c", `echo "$SENTINEL_QUEUE_RESOURCES"`)
	requireCode(t, r, exitOK)
	require.Equal(t, "-tray2 printer\n", r.stdout)
	evs, err := e.client.QueueHistory(ctxT(t), "-tray2", 0, 10)
	require.NoError(t, err)
	require.NotEmpty(t, evs, "a turn was taken on -tray2")

	const hint = "a RESOURCE that starts with - goes after a first --, the command after a second: sentinel queue lock -- -r -- CMD"
	r = e.run("queue", "lock", "-tray2", "--", "true")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, hint)
	r = e.run("queue", "lock", "--", "--", "true")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "needs at least one RESOURCE")
	require.Contains(t, r.stderr, hint)
	r = e.run("queue", "lock", "--", "-tray2", "--")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "nothing after --")
}
