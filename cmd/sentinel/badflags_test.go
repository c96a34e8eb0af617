package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/stretchr/testify/require"
)

// A negative --kill-after (every termination an immediate SIGKILL, no
// grace) or --timeout (silently: wait forever) is refused as bad input,
// exit 2, before anything is taken: no lease, ticket or term is written
// and the command does not run.
func TestNegativeDurationsAreRefusedBeforeTaking(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, args := range [][]string{
		{"lock", "k1", "--kill-after", "-1s", "--", "touch", "/nonexistent/ran"},
		{"lock", "k1", "--timeout", "-1s", "--", "true"},
		{"queue", "lock", "printer", "--timeout", "-1s", "--", "true"},
		{"queue", "lock", "printer", "--kill-after", "-5s", "--", "true"},
		{"elect", "g1", "--kill-after", "-1s", "--", "true"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "give a duration of 0", "%v", args)
	}
	r := e.run("leases", "--expired", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no lease row was written")
	r = e.run("queue", "status", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no ticket was drawn")
	r = e.run("elections", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no election row was written")
}

// follow --after with a cursor Follow refuses exits 2, and no longer
// ends with "resume with --after" that same cursor, which fails again
// when run as printed.
func TestFollowWithABadCursorOffersNoResume(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	r := e.run("follow", "--after", "garbage", "--count", "1")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, `invalid --after "garbage"`)
	require.NotContains(t, r.stderr, "resume with", r.stderr)
}

// follow --type with a type no event ever has (a typo at 3 a.m.:
// "complete") warns at once, naming the nearest type, instead of following
// nothing in silence; a known type gets no warning.
func TestFollowWarnsOfAnUnknownEventType(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	c := e.newClient("default")
	_, err := sentinel.Once(ctxT(t), c, "order-1", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	r := e.run("follow", "--type", "complete", "--type", "completed", "--after", "0", "--count", "1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `no event of type "complete"; did you mean "completed"?`)
	require.NotContains(t, r.stderr, `type "completed"`)
	require.Contains(t, r.stdout, "order-1")
	require.Contains(t, r.stdout, "completed")
}

// A "--" with nothing after it (a cron line's `-- $JOB` with JOB empty)
// is bad input, exit 2, before anything is taken: lock, elect and queue
// lock no longer hold until interrupted, which a cron job never is.
func TestNothingAfterDashIsRefused(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, args := range [][]string{
		{"lock", "k1", "--"},
		{"elect", "g1", "--"},
		{"queue", "lock", "printer", "--"},
	} {
		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second) // it held until interrupted
		cmd := exec.CommandContext(ctx, bin, append([]string{"--schema", e.schema}, args...)...)
		cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL)
		out, _ := cmd.CombinedOutput()
		cancel()
		require.Equal(t, exitUsage, cmd.ProcessState.ExitCode(), "%v: %s", args, out)
		require.Contains(t, string(out), "nothing after --", "%v", args)
	}
	r := e.run("leases", "--expired", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no lease row was written")
	r = e.run("queue", "status", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no ticket was drawn")
	r = e.run("elections", "-A", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `[]`, r.stdout, "no election row was written")
}
