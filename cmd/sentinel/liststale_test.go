package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// sentinel list (and list --rerun-pending, the command status
// --exit-code prints for keys rerun pending too long) showed a key whose
// lease ended an hour ago, which status pages on, the same as one whose
// lease ended a second ago, which the next caller may still re-run: the
// operator could not tell which ones were paged about. list now takes
// --rerun-pending-after (default 15m, as status's), marks the stale ones
// as needing an operator, and gives "needs_operator" in --json (true for
// an uncertain key too), as idempotency list does; status prints the
// list command with its threshold when it is not the default.
func TestListMarksStaleRerunPending(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	ctx := ctxT(t)
	e.rerunPendingAged(e.client, "job-old")
	e.rerunPending(e.client, "job-new")
	e.uncertainKey(e.client, "job-unc")
	_, err := sentinel.Once(ctx, e.client, "job-done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	read := func(args ...string) map[string]bool {
		t.Helper()
		r := e.run(append([]string{"list", "--json"}, args...)...)
		requireCode(t, r, exitOK)
		var out struct {
			Executions []struct {
				Key           string `json:"key"`
				NeedsOperator *bool  `json:"needs_operator"`
			} `json:"executions"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		m := map[string]bool{}
		for _, x := range out.Executions {
			require.NotNil(t, x.NeedsOperator, r.stdout)
			m[x.Key] = *x.NeedsOperator
		}
		return m
	}
	// At the default 15m, only the uncertain key needs an operator.
	require.Equal(t, map[string]bool{"job-old": false, "job-new": false, "job-unc": true, "job-done": false}, read())
	// At 10m, the key whose lease ended 12 minutes ago does too.
	require.Equal(t, map[string]bool{"job-old": true, "job-new": false, "job-unc": true, "job-done": false},
		read("--rerun-pending-after", "10m"))
	require.Equal(t, map[string]bool{"job-old": true, "job-new": false}, read("--rerun-pending", "--rerun-pending-after", "10m"))

	// The text: the stale one is marked, in the words status uses for
	// the list ("executing (rerun pending, needs an operator"), the fresh one is not.
	r := e.run("list", "--rerun-pending", "--rerun-pending-after", "10m")
	requireCode(t, r, exitOK)
	require.Regexp(t, `job-old\s+executing \(rerun pending, needs an operator: attempt 1 of 3 stopped, no caller with WithRerun came back for more than 10m\)`, r.stdout)
	require.Regexp(t, `job-new\s+executing \(rerun pending: attempt 1 of 3 stopped, the next caller with WithRerun runs attempt 2\)\s`, r.stdout)
	// The default output is unchanged for them.
	r = e.run("list", "--rerun-pending")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "needs an operator")
	require.Regexp(t, `job-old\s+executing \(rerun pending: attempt 1 of 3 stopped, the next caller with WithRerun runs attempt 2\)\s`, r.stdout)

	// status, given the threshold, prints the list command with it: the
	// list then marks what status counted.
	r = e.run("status", "--exit-code", "--rerun-pending-after", "10m")
	requireCode(t, r, exitAttention)
	line := findCommand(t, r.stderr, "sentinel list --rerun-pending")
	require.Contains(t, line, "--rerun-pending-after 10m")
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `job-old\s+executing \(rerun pending, needs an operator: attempt 1 of 3 stopped`, p.stdout)
	r = e.run("status", "--exit-code")
	require.NotContains(t, findCommand(t, r.stderr, "sentinel list --uncertain"), "--rerun-pending-after")

	for _, d := range []string{"0s", "-5m"} {
		r = e.run("list", "--rerun-pending-after", d)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--rerun-pending-after \S+: give a duration of more than 0 \(such as 15m\)`, r.stderr)
		require.Contains(t, r.stderr, "sentinel list --help")
	}
	h := e.run("list", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending-after")
	require.Contains(t, h.stdout, "needs_operator")
}
