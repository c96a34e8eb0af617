package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// queue reset RESOURCE without -n acts on namespace "default". For a
// resource whose queue is in another namespace it printed "printer:
// removed 0 dead tickets" and exited 0, as for a clean queue, while the
// queue meant was busy (exit 4 there) or held dead tickets. It now says,
// as queue status does, that the resource has a queue in the other
// namespace, with the same command there, runnable as printed.
func TestQueueResetNamesTheNamespaceOfTheQueue(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	office := e.newClient("office")
	turn, err := office.Turn(ctxT(t), "printer", sentinel.WithLabel("nightly report"))
	require.NoError(t, err)
	defer func() { _ = turn.Release(ctxT(t)) }()

	r := e.run("queue", "reset", "printer")
	requireCode(t, r, exitOK) // nothing to do in "default"; the note says where the queue is
	require.Contains(t, r.stderr, `note: "printer" has no queue in namespace "default" yet, but has one in namespace "office"`)
	line := findCommand(t, r.stderr, "sentinel queue reset")
	require.Equal(t, "sentinel queue reset printer --namespace office --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitRefused)
	require.Contains(t, p.stdout, "printer: busy (1 live tickets), not reset")

	// In its own namespace: no note.
	r = e.run("queue", "reset", "printer", "-n", "office")
	requireCode(t, r, exitRefused)
	require.NotContains(t, r.stderr, "note:")
}
