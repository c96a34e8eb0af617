package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// reset says what it made of the key in the words status, list and
// inspect then show it in: "handed back (safe to retry)", not "claimed
// with an expired lease", a second name for the same state.
func TestResetSaysHandedBack(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "order-1")
	requireCode(t, e.run("reconcile", "order-1", "--yes"), exitOK)
	r := e.run("reset", "order-1", "--yes")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "default/order-1 is "+handedBackLabel)
	require.NotContains(t, r.stdout, "expired lease")

	for _, args := range [][]string{{"inspect", "order-1"}, {"list"}, {"status"}} {
		r = e.run(args...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, handedBackLabel, "%v", args)
	}
}
