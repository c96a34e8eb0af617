package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The commands added for round two: status, list, follow; leader, members,
// elect, observe; queue status, follow, reset, lock. Each runs the real
// binary against a real database.

func TestNewCommandsDocumentThemselves(t *testing.T) {
	for _, cmd := range [][]string{{"status"}, {"list"}, {"follow"}, {"leader"}, {"members"}, {"elect"},
		{"observe"}, {"queue"}, {"queue", "status"}, {"queue", "follow"}, {"queue", "reset"}, {"queue", "lock"}} {
		r := runBin(t, nil, nil, append(cmd, "--help")...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, "Examples:", "sentinel %v --help", cmd)
		require.Contains(t, r.stdout, "--json", "sentinel %v --help", cmd)
	}
	for _, args := range [][]string{
		{"status", "extra"},
		{"list", "--state", "sleeping"},
		{"list", "--updated-before", "yesterday"},
		{"list", "--uncertain", "--state", "completed"},
		{"list", "--limit", "0"},
		{"status", "-n", "x", "--all-namespaces"},
		{"leader"},
		{"members", "a", "b"},
		{"elect"},
		{"observe", "g", "--interval", "1ms"},
		{"queue", "lock"},
		{"queue", "lock", "--", "true"},
	} {
		r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:", "%v", args)
	}
}

func TestStatusAndList(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	mail := e.newClient("mail")
	e.uncertainKey(pay, "order-1")
	e.uncertainKey(pay, "order-2")
	e.uncertainKey(mail, "welcome-1")
	for _, k := range []string{"order-3", "order-4", "order-5"} {
		_, err := sentinel.Once(ctxT(t), pay, k, func(context.Context) (string, error) { return "ok", nil })
		require.NoError(t, err)
	}

	r := e.run("status", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "UNCERTAIN")
	require.Contains(t, r.stdout, "order-1")
	require.Contains(t, r.stdout, "order-2")
	require.NotContains(t, r.stdout, "welcome-1")
	// Uncertain counts come first.
	require.Less(t, strings.Index(r.stdout, "UNCERTAIN"), strings.Index(r.stdout, "completed"))

	r = e.run("status", "--all-namespaces", "--json")
	requireCode(t, r, exitOK)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	counts := map[string]int64{}
	for _, c := range st.Counts {
		k := c.Namespace + "/" + string(c.State)
		if c.Uncertain {
			k += "/uncertain"
		}
		counts[k] = c.Count
	}
	require.Equal(t, map[string]int64{"payments/executing/uncertain": 2, "mail/executing/uncertain": 1,
		"payments/completed": 3}, counts)
	require.True(t, st.Counts[0].Uncertain)
	require.Len(t, st.Uncertain, 3)
	require.False(t, st.More)
	for _, u := range st.Uncertain {
		require.True(t, u.Uncertain)
		require.NotEmpty(t, u.Owner)
	}

	r = e.run("status", "--all-namespaces", "--limit", "1", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Uncertain, 1)
	require.True(t, st.More)

	// list: filters and paging.
	r = e.run("list", "--uncertain", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var page struct {
		Executions []execJSON `json:"executions"`
		Next       string     `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Equal(t, []string{"order-1", "order-2"}, keysOf(page.Executions))
	require.Empty(t, page.Next)

	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		args := []string{"list", "-n", "payments", "--state", "completed", "--limit", "2", "--json"}
		if cursor != "" {
			args = append(args, "--after", cursor)
		}
		r = e.run(args...)
		requireCode(t, r, exitOK)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
		got = append(got, keysOf(page.Executions)...)
		if cursor = page.Next; cursor == "" {
			break
		}
	}
	require.Equal(t, []string{"order-3", "order-4", "order-5"}, got)

	r = e.run("list", "-n", "payments", "--state", "completed", "--limit", "2", "--all", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Equal(t, []string{"order-3", "order-4", "order-5"}, keysOf(page.Executions))

	r = e.run("list", "-A", "--older-than", "1h", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page))
	require.Empty(t, page.Executions)
	r = e.run("list", "-A", "--newer-than", "1h")
	requireCode(t, r, exitOK)
	for _, k := range []string{"order-1", "order-5", "welcome-1", "UNCERTAIN"} {
		require.Contains(t, r.stdout, k)
	}
	r = e.run("list", "-n", "payments", "--state", "completed", "--limit", "2")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "--after ")
}

func keysOf(es []execJSON) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Key)
	}
	return out
}

// follow sees events committed after it started, live.
func TestFollowSeesLiveEvents(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	other := e.newClient("other")
	// follow starts after the last event of an earlier key (--after), so
	// it cannot miss what comes next however slowly it starts.
	_, err := sentinel.Once(ctxT(t), pay, "order-8", func(context.Context) (int, error) { return 8, nil })
	require.NoError(t, err)
	hist, err := pay.History(ctxT(t), "order-8")
	require.NoError(t, err)
	cmd, _, out, stderr := e.start("follow", "-n", "payments", "--json", "--count", "3", "--type", "claimed",
		"--type", "started", "--type", "completed", "--after", strconv.FormatInt(hist[len(hist)-1].ID, 10))
	_, err = sentinel.Once(ctxT(t), other, "elsewhere", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctxT(t), pay, "order-9", func(context.Context) (int, error) { return 9, nil })
	require.NoError(t, err)
	var types []string
	for range 3 {
		line, err := out.ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr)
		var ev eventJSON
		require.NoError(t, json.Unmarshal([]byte(line), &ev))
		require.Equal(t, "payments", ev.Namespace)
		require.Equal(t, "order-9", ev.Key)
		require.NotZero(t, ev.ID)
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{"claimed", "started", "completed"}, types)
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}

// Issue 17.8: follow prints the cursor to resume from; --after CURSOR
// delivers an event with a lower ID whose transaction committed while no
// follow ran, and repeats nothing.
func TestFollowResumesFromCursor(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	ctx := ctxT(t)
	// From the start of the history (cursor 0), so that the order in
	// which the command starts and the events commit does not matter.
	cmd, _, out, stderr := e.start("follow", "-n", "payments", "--json", "--count", "3", "--after", "0")
	slow, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = slow.Rollback(ctx) }()
	_, err = slow.Exec(ctx, `INSERT INTO "`+e.schema+`".events (namespace, key, event, state, token, owner)
		VALUES ('payments', 'slow', 'manual', 'completed', 1, 'test')`)
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, pay, "fast", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	var last eventJSON
	for range 3 {
		line, err := out.ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr)
		require.NoError(t, json.Unmarshal([]byte(line), &last))
		require.Equal(t, "fast", last.Key)
		require.NotEmpty(t, last.Cursor)
	}
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	require.Contains(t, stderr.String(), "resume with --after "+last.Cursor)
	require.NoError(t, slow.Commit(ctx))

	r := e.run("follow", "-n", "payments", "--json", "--count", "1", "--after", last.Cursor)
	requireCode(t, r, exitOK)
	var ev eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ev), "stdout: %s", r.stdout)
	require.Equal(t, "slow", ev.Key)
	require.Less(t, ev.ID, last.ID)

	r = e.run("follow", "--after", "not-a-cursor", "--count", "1")
	require.NotEqual(t, exitOK, r.code)
	require.Contains(t, r.stderr, `invalid --after "not-a-cursor"`)
}

// follow runs until interrupted, then exits 0.
func TestFollowInterrupted(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, _, stderr := e.start("follow")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "following") }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}

// startElector runs a library elector of group (TTL 2s) until stop is
// called or the test ends; stop returns once it stepped down.
func (e *env) startElector(c *sentinel.Client, group string) (el *sentinel.Elector, stop func()) {
	e.t.Helper()
	el, err := c.Elector(group, sentinel.ElectorOptions{TTL: 2 * time.Second, AppVersion: "v1.2.3"})
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return el, stop
}

// runElector starts an elector and returns it once it leads.
func (e *env) runElector(c *sentinel.Client, group string) (*sentinel.Elector, func()) {
	e.t.Helper()
	el, stop := e.startElector(c, group)
	require.Eventually(e.t, el.IsLeader, 10*time.Second, 10*time.Millisecond)
	return el, stop
}

func TestLeaderAndMembers(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	r := e.run("leader", "scheduler")
	requireCode(t, r, exitNotFound)
	require.Contains(t, r.stderr, "no leader")

	el, _ := e.runElector(e.client, "scheduler")
	r = e.run("leader", "scheduler", "--json")
	requireCode(t, r, exitOK)
	var l leaderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &l))
	require.Equal(t, el.Term(), l.Term)
	require.Equal(t, e.client.Owner(), l.Owner)
	require.Equal(t, "v1.2.3", l.AppVersion)
	require.Equal(t, os.Getpid(), l.PID)

	r = e.run("leader", "scheduler")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, strconv.FormatInt(el.Term(), 10))

	// A second elector follows.
	follower := e.newClient("default")
	e.startElector(follower, "scheduler")
	var ms []memberJSON
	require.Eventually(t, func() bool {
		r = e.run("members", "scheduler", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &ms) == nil && len(ms) == 2
	}, 10*time.Second, 50*time.Millisecond, "members: %+v", r)
	require.True(t, ms[0].Leader)
	require.False(t, ms[1].Leader)
	require.Equal(t, follower.Owner(), ms[1].Owner)

	r = e.run("members", "scheduler")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "*  "+e.client.Owner())

	r = e.run("members", "scheduler", "-n", "elsewhere")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "no electors")
}

func TestElectRunsCommandWhileLeading(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	// The child prints its term, waits for a line on stdin and exits 6.
	cmd, stdin, out, stderr := e.start("elect", "-n", "billing", "scheduler", "--ttl", "1500ms", "--",
		"sh", "-c", `echo "$SENTINEL_ELECTION_NAMESPACE $SENTINEL_ELECTION_GROUP $SENTINEL_ELECTION_TERM"; read line; exit 6`)
	term := readNameToken(t, out, stderr, "billing", "scheduler")

	// The binary leads with that term, renewed past its TTL, and a
	// library elector only follows.
	billing := e.newClient("billing")
	time.Sleep(2 * time.Second)
	l, err := billing.Leader(ctxT(t), "scheduler")
	require.NoError(t, err)
	require.Equal(t, term, l.Term)
	el, _ := e.startElector(billing, "scheduler")
	time.Sleep(300 * time.Millisecond)
	require.False(t, el.IsLeader())

	// The command exits: elect steps down with its code, and the library
	// elector takes over promptly (woken by the release, not by expiry).
	_, err = stdin.Write([]byte("done\n"))
	require.NoError(t, err)
	stepped := time.Now()
	require.Equal(t, 6, exitCodeOf(t, cmd), "stderr: %s", stderr)
	require.Eventually(t, el.IsLeader, 5*time.Second, 5*time.Millisecond)
	require.Greater(t, el.Term(), term)
	t.Logf("takeover %v after the command exited (TTL 1.5s)", time.Since(stepped).Round(time.Millisecond))
}

func TestElectWithoutCommandLeadsUntilInterrupted(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	// Somebody else leads first: elect follows, and says so.
	other := e.newClient("default")
	_, stepDown := e.runElector(other, "g")

	cmd, _, out, stderr := e.start("elect", "g", "--json", "--ttl", "2s")
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "following") }, 10*time.Second, 20*time.Millisecond)
	stepDown() // the library leader steps down

	line, err := out.ReadString('}')
	require.NoError(t, err, "stderr: %s", stderr)
	var got struct {
		Group string `json:"group"`
		Term  int64  `json:"term"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &got))
	require.Equal(t, "g", got.Group)
	l, err := e.client.Leader(ctxT(t), "g")
	require.NoError(t, err)
	require.Equal(t, got.Term, l.Term)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	_, err = e.client.Leader(ctxT(t), "g")
	require.ErrorIs(t, err, sentinel.ErrNoLeader, "stepping down releases the term at once")
}

func TestObservePrintsEachNewLeader(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.start("observe", "g", "--json", "--interval", "50ms", "--count", "3")
	type change struct {
		Leader *leaderJSON `json:"leader"`
	}
	next := func() change {
		t.Helper()
		line, err := out.ReadString('\n')
		require.NoError(t, err, "stderr: %s", stderr)
		var c change
		require.NoError(t, json.Unmarshal([]byte(line), &c))
		return c
	}
	require.Nil(t, next().Leader)

	el, stepDown := e.runElector(e.client, "g")
	c := next()
	require.NotNil(t, c.Leader)
	require.Equal(t, el.Term(), c.Leader.Term)
	stepDown()
	require.Nil(t, next().Leader)
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}

func TestQueueStatusFollowAndLock(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	office := e.newClient("office")

	r := e.run("queue", "status", "-n", "office")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "no queue")

	// --after 0: from the first event of the (new) schema, however slowly
	// the process starts.
	follow, _, fout, ferr := e.start("queue", "follow", "printer", "-n", "office", "--count", "6", "--after", "0")

	held, err := office.Turn(ctxT(t), "printer", sentinel.WithLabel("nightly report"))
	require.NoError(t, err)
	// A second ticket waits behind it.
	waiter := make(chan *sentinel.Turn, 1)
	go func() {
		w, err := office.Turn(context.Background(), "printer", sentinel.WithLabel("invoices"))
		if err != nil {
			t.Error(err)
		}
		waiter <- w
	}()
	require.Eventually(t, func() bool {
		q, err := office.Queue(ctxT(t), "printer")
		return err == nil && len(q.Waiting) == 1
	}, 10*time.Second, 20*time.Millisecond)

	r = e.run("queue", "status", "-n", "office")
	requireCode(t, r, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.True(t, strings.HasPrefix(lines[0], "printer"))
	require.True(t, strings.HasSuffix(lines[0], strconv.FormatInt(held.Ticket(), 10)))
	require.True(t, strings.HasPrefix(lines[2], "nightly report"))
	require.True(t, strings.HasPrefix(lines[3], "invoices"))

	r = e.run("queue", "status", "printer", "-n", "office", "--json")
	requireCode(t, r, exitOK)
	var qs []queueJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &qs))
	require.Len(t, qs, 1)
	require.Equal(t, held.Ticket(), qs[0].Holder.Ticket)
	require.Equal(t, "nightly report", qs[0].Holder.Label)
	require.Len(t, qs[0].Waiting, 1)
	require.Equal(t, "invoices", qs[0].Waiting[0].Label)

	// Busy: reset refuses, removes nothing.
	r = e.run("queue", "reset", "printer", "-n", "office")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stdout, "printer: busy (2 live tickets), not reset")

	require.NoError(t, held.Release(ctxT(t)))
	w := <-waiter
	require.NotNil(t, w)
	require.NoError(t, w.Release(ctxT(t)))

	var msgs []string
	for range 6 {
		line, err := fout.ReadString('\n')
		require.NoError(t, err, "stderr: %s", ferr)
		msgs = append(msgs, strings.TrimSpace(line))
	}
	h, n := held.Ticket(), w.Ticket()
	require.Equal(t, []string{
		"printer: " + strconv.FormatInt(h, 10) + ` assigned to "nightly report"`,
		"printer: " + strconv.FormatInt(h, 10) + " granted",
		"printer: " + strconv.FormatInt(n, 10) + ` assigned to "invoices"`,
		"printer: " + strconv.FormatInt(h, 10) + ` completed by "nightly report"`,
		"printer: " + strconv.FormatInt(n, 10) + " granted",
		"printer: " + strconv.FormatInt(n, 10) + ` completed by "invoices"`,
	}, msgs)
	require.Equal(t, 0, exitCodeOf(t, follow), "stderr: %s", ferr)
}

// queue lock runs a command on turns of several resources; others queue
// behind it; it exits with the command's code.
func TestQueueLockRunsCommand(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, stdin, out, stderr := e.start("queue", "lock", "scanner", "printer", "--label", "scan and print", "--ttl", "1500ms", "--",
		"sh", "-c", `echo "$SENTINEL_QUEUE_RESOURCES|$SENTINEL_QUEUE_TICKETS"; read line; exit 4`)
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	parts := strings.Split(strings.TrimSpace(line), "|")
	require.Equal(t, "printer scanner", parts[0], "sorted order")
	tickets := map[string]int64{}
	for _, kv := range strings.Fields(parts[1]) {
		r, n, ok := strings.Cut(kv, "=")
		require.True(t, ok)
		tickets[r], err = strconv.ParseInt(n, 10, 64)
		require.NoError(t, err)
	}
	require.Len(t, tickets, 2)

	// Held past the TTL: a library Turn on printer waits, the status shows
	// the label.
	time.Sleep(2 * time.Second)
	q, err := e.client.Queue(ctxT(t), "printer")
	require.NoError(t, err)
	require.NotNil(t, q.Holder)
	require.Equal(t, tickets["printer"], q.Holder.Ticket)
	require.Equal(t, "scan and print", q.Holder.Label)
	short, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	_, err = e.client.Turn(short, "printer")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	require.Equal(t, 4, exitCodeOf(t, cmd), "stderr: %s", stderr)
	tu, err := e.client.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	require.Greater(t, tu.Ticket(), tickets["printer"])
	require.NoError(t, tu.Release(ctxT(t)))

	// --timeout while another holds the turn: exit 4.
	tu, err = e.client.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = tu.Release(context.Background()) }()
	r := e.run("queue", "lock", "printer", "--timeout", "300ms", "--", "true")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "--timeout")
}

// A queue lock process killed with SIGKILL leaves a dead ticket; reset
// removes it and records it.
func TestQueueResetRemovesDeadTickets(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.start("queue", "lock", "printer", "--ttl", "1s")
	_, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	// Dead once its expiry passes on the database clock.
	require.Eventually(t, func() bool {
		r := e.run("queue", "reset", "--json")
		if r.code != exitOK {
			return false
		}
		var got struct {
			Removed map[string]int `json:"removed"`
			Busy    map[string]int `json:"busy"`
		}
		return json.Unmarshal([]byte(r.stdout), &got) == nil && got.Removed["printer"] == 1 && len(got.Busy) == 0
	}, 10*time.Second, 200*time.Millisecond)
	r := e.run("queue", "reset", "printer")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "printer: removed 0 dead tickets")
	evs, err := e.client.QueueHistory(ctxT(t), "printer", 0, 10)
	require.NoError(t, err)
	require.Equal(t, "crashed", evs[len(evs)-1].Type)
}

func TestExitCodesOfNewErrors(t *testing.T) {
	require.Equal(t, exitNotFound, exitCode(errors.Join(errors.New("x"), sentinel.ErrNoLeader)))
	require.Equal(t, exitRefused, exitCode(&sentinel.QueueBusyError{Resource: "p", Live: 1}))
}

// Issue 17.7: with a --schema that was never migrated every command that
// reads or writes Sentinel's tables exits non-zero at once, saying so,
// instead of printing a raw SQL error or (elect, follow, lock) waiting
// forever.
func TestCommandsOnUnmigratedSchema(t *testing.T) {
	schema := "nope_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_")
	for _, args := range [][]string{
		{"status"}, {"list"}, {"leases"}, {"follow"}, {"follow", "--after", "5"},
		{"elect", "g", "--", "true"}, {"elect", "g"}, {"leader", "g"}, {"members", "g"}, {"observe", "g"},
		{"inspect", "k"}, {"history", "k"}, {"prune", "--older-than", "1h", "--yes"},
		{"lock", "k", "--", "true"}, {"queue", "status"}, {"queue", "follow"}, {"queue", "lock", "r", "--", "true"},
	} {
		start := time.Now()
		r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, append([]string{"--schema", schema}, args...)...)
		require.NotEqual(t, exitOK, r.code, "%v: %s", args, r.stdout)
		require.Less(t, time.Since(start), 10*time.Second, "%v", args)
		require.Contains(t, r.stderr, "not migrated", "%v", args)
		require.Contains(t, r.stderr, "sentinel migrate", "%v", args)
		require.NotContains(t, r.stderr, "Run 'sentinel --help'", "%v", args)
	}
}
