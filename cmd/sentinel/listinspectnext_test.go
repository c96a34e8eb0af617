package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// status --exit-code --rerun-pending-after 10m pages on a key rerun
// pending for 12 minutes and prints "list --rerun-pending ...
// --rerun-pending-after 10m; inspect, then reconcile". That list marked
// the key NEEDS AN OPERATOR and printed nothing more for a key that is not
// an HTTP request's, so the operator typed "sentinel inspect KEY", which,
// at its default 15m, said the next caller runs it again and printed no
// step: a dead end at 3 a.m. list now prints, on stderr, the inspect
// command of each key it marks, carrying the threshold, which prints the
// reconcile step.
func TestListPrintsInspectOfStaleRerunPending(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("pay ments")
	const key = "order $7's"
	e.rerunPendingAged(pay, key)
	e.rerunPending(pay, "fresh")

	s := e.run("status", "--exit-code", "--rerun-pending-after", "10m", "-n", "pay ments")
	requireCode(t, s, exitAttention)
	list := findCommand(t, s.stderr, "sentinel list --rerun-pending")
	r := runPrinted(t, list, "")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "rerun pending, needs an operator")
	line := findCommand(t, r.stderr, "sentinel inspect ")
	require.Equal(t, `sentinel inspect 'order $7'\''s' -n 'pay ments' --rerun-pending-after 10m --schema `+e.schema, line)
	require.NotContains(t, r.stdout, "sentinel inspect fresh")
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	findCommand(t, p.stdout, "sentinel reconcile 'order $7'\\''s' -n 'pay ments' --token 1")

	// At the default, nothing is marked and no line is printed.
	r = e.run("list", "--rerun-pending", "-n", "pay ments")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout+r.stderr, "sentinel inspect")
}
