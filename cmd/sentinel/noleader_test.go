package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A group of this namespace whose leader resigned (or expired) has no
// leader now: the error says so, gives the members command line to run
// (not a Go method name), and does not say that no other namespace has
// the group "either", as if it were not here.
func TestLeaderNoneInExistingGroup(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, stop := e.runElector(e.client, "sched")
	stop() // resigns: the group's leadership row stays, expired

	r := e.run("leader", "sched")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `election group "sched" of namespace "default" has no leader now`)
	require.NotContains(t, r.stderr, "Members")
	require.NotContains(t, r.stderr, "either")
	line := findCommand(t, r.stderr, "sentinel members")
	require.Equal(t, "sentinel members sched --namespace default --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stderr, "no electors in default/sched")
	require.NotContains(t, p.stderr, "either")

	// The same group leads in another namespace: that one is named too,
	// with its command, but the group here is not denied.
	pay := e.newClient("payments")
	e.runElector(pay, "sched")
	r = e.run("leader", "sched")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `election group "sched" of namespace "default" has no leader now`)
	require.NotContains(t, r.stderr, "either")
	p = runPrinted(t, findCommand(t, r.stderr, "sentinel leader"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, pay.Owner())

	// A group that is nowhere: said as before.
	r = e.run("leader", "nightly")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `namespace "default" has no election group "nightly"`)
	require.Contains(t, r.stderr, `no other namespace has an election group "nightly" either`)
	require.NotContains(t, r.stderr, "Members")
}
