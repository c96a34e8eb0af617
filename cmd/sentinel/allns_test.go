package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// A key command that finds no execution of its key in its namespace (the
// default one when the operator names none, as at 3 a.m.) says where the
// key has one, with the same command there, runnable as printed; a key
// that is nowhere says so; the search is bounded by the namespaces it
// walks, not by the executions the table holds. leader and members do the
// same for an election group.
func TestKeyInAnotherNamespaceIsNamed(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-7")

	r := e.run("inspect", "order-7")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `"order-7" has an execution in namespace "payments"; the same command there:`)
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel inspect"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "UNCERTAIN")

	// A command that changes something: the printed line keeps what the
	// operator typed (--yes) and acts on the key where it is.
	r = e.run("reconcile", "order-7", "--yes")
	requireCode(t, r, exitNotFound)
	p = runPrinted(t, findCommand(t, r.stderr, "sentinel reconcile order-7 --yes"), "")
	requireCode(t, p, exitOK)
	ex, err := pay.Inspect(ctxT(t), "order-7")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)
	_, err = sentinel.Once(ctxT(t), pay, "order-7", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrReconciling) // the application's retry meets the operator's step

	// In two other namespaces (a wrong -n): both, each with its command.
	e.uncertainKey(e.newClient("refunds"), "order-7")
	r = e.run("history", "order-7", "-n", "shipping")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `"order-7" has executions in 2 other namespaces; the same command in each:`)
	require.Equal(t, []string{
		"sentinel history order-7 --namespace payments --schema " + e.schema,
		"sentinel history order-7 --namespace refunds --schema " + e.schema,
	}, printedCommands(r.stderr))

	// An election group of another namespace: "no leader" is not the
	// answer.
	e.runElector(pay, "scheduler")
	r = e.run("leader", "scheduler")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `"scheduler" is an election group of namespace "payments"; the same command there:`)
	p = runPrinted(t, findCommand(t, r.stderr, "sentinel leader"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, pay.Owner())
	r = e.run("members", "scheduler")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "no electors in default/scheduler")
	p = runPrinted(t, findCommand(t, r.stderr, "sentinel members"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, pay.Owner())
	r = e.run("leader", "nightly")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `no other namespace has an election group "nightly" either`)

	// Nowhere.
	r = e.run("inspect", "order-8")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `no other namespace has an execution of "order-8" either`)
	require.Empty(t, printedCommands(r.stderr))

	// More namespaces than it walks: it says it stopped, and finds nothing
	// beyond.
	s := pgx.Identifier{e.schema}.Sanitize()
	_, err = admin.Exec(ctxT(t), `INSERT INTO `+s+`.executions (namespace, key, state, owner, token, created_at, updated_at)
SELECT pg_catalog.format('ns%s', pg_catalog.lpad(i::text, 4, '0')), 'filler', 'completed', 'test', i, pg_catalog.now(), pg_catalog.now()
FROM pg_catalog.generate_series(1, $1::int) AS i
UNION ALL SELECT 'zz-last', 'order-9', 'completed', 'test', 0, pg_catalog.now(), pg_catalog.now()`, maxNamespacesVisited)
	require.NoError(t, err)
	r = e.run("inspect", "order-9")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, `no other namespace has an execution of "order-9" either (of the first 1000 namespaces; there are more)`)
	r = e.run("inspect", "filler", "-n", "ns0001")
	requireCode(t, r, exitOK)
}

// lock, elect and queue lock on a name new to their namespace but known in
// another warn, with the command for that namespace (runnable as
// printed, its command after "--" kept), and go on: a lease, a term or a
// turn taken in a namespace the application does not use excludes
// nothing there. observe, follow KEY and queue status and follow
// RESOURCE warn the same way: they would show nothing.
func TestTakingInANewNamespaceWarns(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	r := e.run("lock", "-n", "jobs", "nightly", "--", "true")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "note:")

	r = e.run("lock", "nightly", "--ttl", "5s", "--", "sh", "-c", `echo "in $SENTINEL_LEASE_NAMESPACE"`)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "in default") // it went on
	require.Contains(t, r.stderr, `note: "nightly" has no lease in namespace "default" yet, but has one in namespace "jobs"`)
	line := findCommand(t, r.stderr, "sentinel lock nightly")
	require.Equal(t, `sentinel lock nightly --ttl 5s --namespace jobs --schema `+e.schema+` -- sh -c 'echo "in $SENTINEL_LEASE_NAMESPACE"'`, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "in jobs")

	// Known here now: no warning.
	r = e.run("lock", "nightly", "--", "true")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "note:")

	r = e.run("queue", "lock", "-n", "office", "printer", "--", "true")
	requireCode(t, r, exitOK)
	r = e.run("queue", "lock", "printer", "--", "true")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `note: "printer" has no queue in namespace "default" yet, but has one in namespace "office"`)
	line = findCommand(t, r.stderr, "sentinel queue lock")
	require.Equal(t, "sentinel queue lock printer --namespace office --schema "+e.schema+" -- true", line)
	p = runPrinted(t, line, "")
	requireCode(t, p, exitOK)

	r = e.run("elect", "-n", "ops", "sched", "--ttl", "2s", "--", "true")
	requireCode(t, r, exitOK)
	r = e.run("elect", "sched", "--ttl", "2s", "--", "true")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `note: "sched" is not an election group of namespace "default" yet, but is one of namespace "ops"`)
	line = findCommand(t, r.stderr, "sentinel elect")
	require.Equal(t, "sentinel elect sched --ttl 2s --namespace ops --schema "+e.schema+" -- true", line)
	p = runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stderr, "leadership of ops/sched")

	// The commands that watch say it too: nothing would show up here.
	r = e.run("observe", "sched", "-n", "billing", "--count", "1")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "billing/sched: no leader")
	require.Contains(t, r.stderr, `note: "sched" is not an election group of namespace "billing" yet, but is one of namespaces "default", "ops"; the same command in each:`)
	require.Equal(t, []string{
		"sentinel observe sched --count 1 --namespace default --schema " + e.schema,
		"sentinel observe sched --count 1 --namespace ops --schema " + e.schema,
	}, printedCommands(r.stderr))
	p = runPrinted(t, printedCommands(r.stderr)[1], "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "ops/sched")
	r = e.run("queue", "status", "printer", "-n", "billing")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `note: "printer" has no queue in namespace "billing" yet, but has one in namespaces "default", "office"`)
	p = runPrinted(t, findCommand(t, r.stderr, "sentinel queue status printer --namespace office"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "printer")

	// The followers here would wait for nothing: each is stopped once its
	// note is out, and the printed command replays the other namespace's
	// history (--after 0, --count 1) and ends.
	e.uncertainKey(e.newClient("payments"), "order-7")
	for _, c := range []struct {
		args         []string
		prefix, line string
	}{
		{[]string{"follow", "order-7", "--after", "0", "--count", "1"}, "sentinel follow order-7",
			"sentinel follow order-7 --after 0 --count 1 --namespace payments --schema " + e.schema},
		{[]string{"queue", "follow", "printer", "-n", "billing", "--after", "0", "--count", "1"}, "sentinel queue follow printer",
			""},
	} {
		cmd, _, _, stderr := e.start(c.args...)
		require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "interrupt to stop") }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()
		require.Contains(t, stderr.String(), "note: ")
		lines := printedCommands(stderr.String())
		require.NotEmpty(t, lines, stderr.String())
		if c.line != "" {
			require.Equal(t, []string{c.line}, lines)
		}
		for _, line := range lines {
			require.True(t, strings.HasPrefix(line, c.prefix), line)
			p = runPrinted(t, line, "")
			requireCode(t, p, exitOK)
			require.NotEmpty(t, p.stdout, line)
		}
	}
}

// The error a Once caller gets for an uncertain key ends with the command
// that shows it, which runs as printed (namespace, schema, a key that
// needs quoting or reads as a flag): what an operator copies from the
// application's log.
func TestUncertainErrorCarriesTheCommand(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("pay ments")
	for _, key := range []string{"order-7", "-7 o'clock"} {
		_, first := sentinel.Once(ctxT(t), pay, key, func(context.Context) (int, error) {
			return 0, errors.New("the payment provider timed out")
		})
		require.ErrorIs(t, first, sentinel.ErrUncertain)
		_, later := sentinel.Once(ctxT(t), pay, key, func(context.Context) (int, error) { return 1, nil })
		require.ErrorIs(t, later, sentinel.ErrUncertain)
		for _, err := range []error{first, later} {
			_, line, ok := strings.Cut(err.Error(), "; to look: ")
			require.True(t, ok, err.Error())
			p := runPrinted(t, line, "")
			requireCode(t, p, exitOK)
			require.Contains(t, p.stdout, "UNCERTAIN", line)
			require.Contains(t, p.stdout, key, line)
		}
	}
}

// The namespaces of queues (queue status/follow/reset -A) are found along
// the indexes, one probe per namespace: with 100,000 history rows, the
// statement reads a handful of them (it read them all).
func TestQueueNamespacesReadNoHistory(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	s := pgx.Identifier{e.schema}.Sanitize()
	_, err := admin.Exec(ctxT(t), `INSERT INTO `+s+`.queue_events (namespace, resource, ticket, event, label, owner)
SELECT CASE WHEN i % 2 = 0 THEN 'office' ELSE 'lab' END, 'printer', i, 'completed', '', 'test'
FROM pg_catalog.generate_series(1, 100000) AS i`)
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), `ANALYZE `+s+`.queue_events`)
	require.NoError(t, err)

	var plan []map[string]any
	q := strings.ReplaceAll(sqlQueueNamespaces, "{{schema}}", s)
	require.NoError(t, admin.QueryRow(ctxT(t), "EXPLAIN (ANALYZE, FORMAT JSON) "+q).Scan(&plan))
	read := 0.0
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if n["Relation Name"] == "queue_events" {
			read += n["Actual Rows"].(float64) * n["Actual Loops"].(float64)
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	t.Logf("queue_events rows read to list 2 namespaces of 100,000 rows (the plan's per-loop averages times loops): %.0f", read)
	require.LessOrEqual(t, read, 10.0, "queue_events rows read to list 2 namespaces")

	r := e.run("queue", "status", "-A", "--json")
	requireCode(t, r, exitOK)
}

// The listings of one namespace (leases, elections, queue status) that
// find nothing there give the command for every namespace, runnable as
// printed, which finds what the others hold.
func TestEmptyListingsPointToEveryNamespace(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	jobs := e.newClient("jobs")
	l, err := jobs.Lease(ctxT(t), "nightly")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()
	e.runElector(jobs, "scheduler")
	tu, err := jobs.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = tu.Release(ctxT(t)) }()

	for _, c := range []struct {
		args      []string
		empty     string
		every     string
		everyFind string
	}{
		{[]string{"leases"}, `no live leases in namespace "default"; every namespace:`, "sentinel leases --all-namespaces", "nightly"},
		{[]string{"elections"}, `no election groups in namespace "default"; every namespace:`, "sentinel elections --all-namespaces", "scheduler"},
		{[]string{"queue", "status"}, `no queue in namespace "default" has a live ticket; every namespace:`, "sentinel queue status --all-namespaces", "jobs/printer"},
	} {
		r := e.run(c.args...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stderr, c.empty)
		line := findCommand(t, r.stderr, c.every)
		require.Equal(t, c.every+" --schema "+e.schema, line)
		p := runPrinted(t, line, "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, c.everyFind)
		r = e.run(append(c.args, "-A")...)
		requireCode(t, r, exitOK)
		require.NotContains(t, r.stderr, "every namespace:")
	}
}

// With --json the same listings printed [] and nothing else: the operator
// piping `sentinel leases --json` into jq at 3 a.m. (no -n) read "no
// leases" while every lease was in another namespace. stdout stays the
// JSON; stderr says what the human listing says, with the command (its
// --json kept) that lists every namespace.
func TestEmptyJSONListingsPointToEveryNamespace(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	jobs := e.newClient("jobs")
	l, err := jobs.Lease(ctxT(t), "nightly")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()
	e.runElector(jobs, "scheduler")
	tu, err := jobs.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = tu.Release(ctxT(t)) }()

	for _, c := range []struct {
		args      []string
		every     string
		everyFind string
	}{
		{[]string{"leases", "--json"}, "sentinel leases --json --all-namespaces", `"nightly"`},
		{[]string{"elections", "--json"}, "sentinel elections --json --all-namespaces", `"scheduler"`},
		{[]string{"queue", "status", "--json"}, "sentinel queue status --json --all-namespaces", `"printer"`},
	} {
		r := e.run(c.args...)
		requireCode(t, r, exitOK)
		require.JSONEq(t, "[]", r.stdout, "stdout stays JSON")
		require.Contains(t, r.stderr, `namespace "default"`, "%q", c.args)
		line := findCommand(t, r.stderr, c.every)
		p := runPrinted(t, line, "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, c.everyFind)
		var v any
		require.NoError(t, json.Unmarshal([]byte(p.stdout), &v))
	}
}
