package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The command leases prints for every namespace, when the namespace
// given has no live lease, carries the --limit the operator typed, not
// the one more row leases asks the database for to tell that rows were
// left out (--limit 5 came back as --limit 6, and 1001 from 1000).
func TestLeasesHintKeepsTheLimitTyped(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, limit := range []string{"5", "1000"} {
		r := e.run("leases", "--limit", limit)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stderr, "sentinel leases --limit "+limit+" --all-namespaces", r.stderr)
	}
}
