package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status without -n covers every namespace; with -n it names the other
// namespaces that need attention. Queues, history and elections take the
// flags of issue 19.6.
func TestEveryNamespaceIsCovered(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-1")
	e.uncertainKey(pay, "order-2")

	r := e.run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "order-1")
	require.Contains(t, r.stdout, "payments")
	r = e.run("status", "-n", "default")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "uncertain executions in other namespaces too: payments (2)")

	// Queues of two namespaces.
	office := e.newClient("office")
	t1, err := office.Turn(ctxT(t), "printer", sentinel.WithLabel("report"))
	require.NoError(t, err)
	t2, err := e.client.Turn(ctxT(t), "scanner", sentinel.WithLabel("scan"))
	require.NoError(t, err)
	r = e.run("queue", "status", "--all-namespaces")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "office/printer")
	require.Contains(t, r.stdout, "default/scanner")
	r = e.run("queue", "status", "-A", "--json")
	requireCode(t, r, exitOK)
	var qs []queueJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &qs))
	require.Len(t, qs, 2)
	r = e.run("queue", "follow", "-A", "--after", "0", "--count", "4")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "office/printer:")
	require.Contains(t, r.stdout, "default/scanner:")
	r = e.run("queue", "reset", "-A")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stdout, "office/printer: busy")
	require.Contains(t, r.stdout, "default/scanner: busy")
	require.NoError(t, t1.Release(ctxT(t)))
	require.NoError(t, t2.Release(ctxT(t)))
	r = e.run("queue", "status", "-A", "-n", "x")
	requireCode(t, r, exitUsage)

	// history --limit: the newest N.
	r = e.run("history", "order-1", "-n", "payments", "--limit", "1")
	requireCode(t, r, exitOK)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 2, r.stdout) // header and one event
	require.Contains(t, r.stdout, "failed")
	require.Contains(t, r.stderr, "earlier events not shown")

	// elections lists the groups.
	_, stop := e.runElector(pay, "scheduler")
	defer stop()
	r = e.run("elections", "-A")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "scheduler")
	require.Contains(t, r.stdout, pay.Owner())
	r = e.run("elections", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var es []electionJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &es))
	require.Len(t, es, 1)
	require.Equal(t, 1, es[0].Members)
	require.NotNil(t, es[0].Leader)
}
