package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// leases and elections print at most --limit rows (1000 by default) and
// said nothing when there were more: an operator looking for a holder or
// a group among the rows left out read it as not there. They now say on
// stderr, text and --json alike, that more rows exist and how to see them.
func TestLeasesAndElectionsSayWhenRowsAreLeftOut(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, k := range []string{"job-a", "job-b", "job-c"} {
		l, err := e.client.Lease(ctxT(t), k, sentinel.WithTTL(time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = l.Release(ctxT(t)) })
	}
	for _, g := range []string{"g-a", "g-b", "g-c"} {
		e.runElector(e.client, g)
	}

	for _, cmd := range []string{"leases", "elections"} {
		r := e.run(cmd, "--limit", "2")
		requireCode(t, r, exitOK)
		require.Contains(t, r.stderr, "more than 2", "%s: %s", cmd, r.stderr)
		r = e.run(cmd, "--limit", "2", "--json")
		requireCode(t, r, exitOK)
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows))
		require.Len(t, rows, 2, r.stdout)
		require.Contains(t, r.stderr, "more than 2", "%s --json: %s", cmd, r.stderr)

		r = e.run(cmd, "--limit", "3")
		requireCode(t, r, exitOK)
		require.NotContains(t, r.stderr, "more than", "%s: %s", cmd, r.stderr)
	}
}
