package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/netfault"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// Queue scenarios: users of one fair queue (Client.Turn) in separate
// processes, each taking turns on one resource in a loop and writing to
// turn_log while served (VerifyTurn in the same transaction), under
// SIGKILL (holders and waiters), SIGSTOP, PostgreSQL restarts and network
// faults. Every history is checked exactly (checkQueue):
//
//   - no overlap: guarded writes in commit order never go back to a lower
//     ticket, and each lies between its ticket's grant and the next grant;
//   - FIFO among live tickets: when a ticket is granted, every lower ticket
//     of the resource has already left the queue (released, cancelled, or
//     skipped as dead by the database clock), in event order;
//   - Done first: a holder that lost its turn had its local deadline
//     before the next grant, on the machine's one clock;
//   - no stall: under kills and pauses, two consecutive grants are never
//     further apart than TTL + the longest hold + 1 s (the queue always has
//     live waiters).

const (
	queueWorkerEnv = "SENTINEL_FAULTS_QUEUE"
	queueTTL       = time.Second
	queueHoldMax   = 60 * time.Millisecond
	queueRes       = `printer "A" 100% *`
)

// queueProfile sizes the queue scenarios.
type queueProfile struct {
	Workers, Kills, Stops, Restarts, NetTrials int
}

func qprof() queueProfile {
	if prof().Name == "long" {
		return queueProfile{Workers: 6, Kills: 40, Stops: 20, Restarts: 10, NetTrials: 6}
	}
	return queueProfile{Workers: 5, Kills: 8, Stops: 5, Restarts: 3, NetTrials: 2}
}

// A queue worker process runs queueWorker instead of the tests.
func init() {
	if os.Getenv(queueWorkerEnv) != "" {
		os.Exit(queueWorker())
	}
}

const turnLogTable = `
CREATE TABLE IF NOT EXISTS turn_log (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource text   NOT NULL,
    ticket   bigint NOT NULL,
    writer   text   NOT NULL,
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// queueWorker takes turns on SFQ_RES until its stdin closes. Lines:
//
//	served TICKET CALL RET
//	write TICKET ok|refused|error CALL RET BELIEF
//	done TICKET lost|released|other DEADLINE AT ERROR
//	release TICKET ok|lost|error CALL RET
//	turn-error MESSAGE
//
// Times are wall-clock nanoseconds, the clock the database shares on this
// machine.
func queueWorker() int {
	go func() { // the driver is gone: exit
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx := context.Background()
	name, res := os.Getenv("SFQ_NAME"), os.Getenv("SFQ_RES")
	cfg, err := pgxpool.ParseConfig(os.Getenv("SFQ_DB"))
	if err != nil {
		emit("fatal %v", err)
		return 1
	}
	cfg.MaxConns = 3
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		emit("fatal %v", err)
		return 1
	}
	c, err := sentinel.New(pool, &sentinel.Config{DefaultTTL: queueTTL, WaitRecheck: 200 * time.Millisecond,
		Owner: fmt.Sprintf("%s-pid%d", name, os.Getpid())})
	if err != nil {
		emit("fatal %v", err)
		return 1
	}
	for n := 0; ; n++ {
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		call := wall()
		t, err := c.Turn(tctx, res, sentinel.WithLabel(fmt.Sprintf("%s#%d", name, n)))
		cancel()
		if err != nil {
			emit("turn-error %s", strings.ReplaceAll(err.Error(), "\n", " "))
			time.Sleep(50 * time.Millisecond)
			continue
		}
		ticket := t.Ticket()
		emit("served %d %d %d", ticket, call, wall())
		go func() {
			<-t.Done()
			kind := "other"
			switch err := t.Err(); {
			case errors.Is(err, sentinel.ErrReleased):
				kind = "released"
			case errors.Is(err, sentinel.ErrLeaseLost):
				kind = "lost"
			}
			emit("done %d %s %d %d %s", ticket, kind, t.Deadline().UnixNano(), wall(), strings.ReplaceAll(fmt.Sprint(t.Err()), "\n", " "))
		}()
		end := time.Now().Add(time.Duration(10+rand.IntN(int(queueHoldMax/time.Millisecond)-10)) * time.Millisecond)
	hold:
		for time.Now().Before(end) {
			belief := 0
			if t.Err() == nil && time.Now().Before(t.Deadline()) {
				belief = 1
			}
			call := wall()
			r := turnWrite(ctx, pool, c, res, ticket, name)
			emit("write %d %s %d %d %d", ticket, r, call, wall(), belief)
			pause := 5 * time.Millisecond
			if strings.HasPrefix(name, "w0.") {
				pause = 0 // slot 0 guards its writes back to back (issue 17.2)
			}
			select {
			case <-t.Done():
				break hold
			case <-time.After(pause):
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		call = wall()
		err = t.Release(rctx)
		rcancel()
		kind := "ok"
		switch {
		case errors.Is(err, sentinel.ErrLeaseLost):
			kind = "lost"
		case err != nil:
			kind = "error"
		}
		emit("release %d %s %d %d", ticket, kind, call, wall())
	}
}

// turnWrite writes one turn_log row guarded by the ticket.
func turnWrite(ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, res string, ticket int64, writer string) string {
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tx, err := pool.Begin(wctx)
	if err != nil {
		return "error"
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := c.VerifyTurn(wctx, tx, res, ticket); err != nil {
		if errors.Is(err, sentinel.ErrStaleToken) {
			return "refused"
		}
		return "error"
	}
	if _, err := tx.Exec(wctx, `INSERT INTO turn_log (resource, ticket, writer) VALUES ($1, $2, $3)`, res, ticket, writer); err != nil {
		return "error"
	}
	if err := tx.Commit(wctx); err != nil {
		return "error"
	}
	return "ok"
}

// queueRun drives worker processes and collects what they report.
type queueRun struct {
	t       *testing.T
	urls    []string // per worker slot
	workers []*child
	gen     []int

	mu      sync.Mutex
	holder  map[int]int64 // slot -> ticket it holds (served, not yet released)
	served  map[int64]int // ticket -> slot
	servedC chan int      // slots, as they are served
	dones   []queueDone
	writes  map[string]int
	turnErr int
	log     map[int64][]string // ticket -> its worker's lines, for violation reports
	// releaseCall: ticket -> when its holder called Release (it stopped
	// trusting the turn then, whatever the outcome).
	releaseCall map[int64]int64
}

type queueDone struct {
	ticket   int64
	kind     string
	deadline int64
}

func newQueueRun(t *testing.T, urls []string) *queueRun {
	r := &queueRun{t: t, urls: urls, workers: make([]*child, len(urls)), gen: make([]int, len(urls)),
		holder: map[int]int64{}, served: map[int64]int{}, servedC: make(chan int, 1<<12), writes: map[string]int{},
		log: map[int64][]string{}, releaseCall: map[int64]int64{}}
	for i := range urls {
		r.spawn(i)
	}
	return r
}

func (r *queueRun) spawn(slot int) {
	r.gen[slot]++
	name := fmt.Sprintf("w%d.%d", slot, r.gen[slot])
	r.workers[slot] = spawn(r.t, name, "queue", []string{queueWorkerEnv + "=1", "SFQ_DB=" + r.urls[slot],
		"SFQ_RES=" + queueRes, "SFQ_NAME=" + name}, func(c *child, line string) { r.onLine(slot, line) })
}

func (r *queueRun) onLine(slot int, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	num := func(i int) int64 {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return n
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if tk := num(1); tk > 0 && f[0] != "turn-error" {
		r.log[tk] = append(r.log[tk], fmt.Sprintf("w%d@%d: %s", slot, wall(), line))
	}
	switch f[0] {
	case "served":
		r.holder[slot] = num(1)
		r.served[num(1)] = slot
		select {
		case r.servedC <- slot:
		default:
		}
	case "release":
		if r.holder[slot] == num(1) {
			delete(r.holder, slot)
		}
		r.releaseCall[num(1)] = num(3)
	case "done":
		r.dones = append(r.dones, queueDone{ticket: num(1), kind: f[2], deadline: num(3)})
	case "write":
		r.writes[f[2]]++
	case "turn-error":
		r.turnErr++
	}
}

// currentHolder returns the slot of the worker holding a turn, if any.
func (r *queueRun) currentHolder() (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.holder {
		return s, true
	}
	return 0, false
}

// nextServed waits for a fresh grant and returns its slot.
func (r *queueRun) nextServed(timeout time.Duration) (int, bool) {
	for len(r.servedC) > 0 {
		<-r.servedC
	}
	select {
	case s := <-r.servedC:
		return s, true
	case <-time.After(timeout):
		return 0, false
	}
}

// pickVictim returns a holder (even i) or a waiter (odd i).
func (r *queueRun) pickVictim(i int) (int, string) {
	if i%2 == 0 {
		if s, ok := r.nextServed(10 * time.Second); ok {
			return s, "holder"
		}
	}
	h, ok := r.currentHolder()
	for {
		s := rand.IntN(len(r.workers))
		if !ok || s != h {
			return s, "waiter"
		}
	}
}

type qevent struct {
	id     int64
	ticket int64
	typ    string
	at     time.Time
}

type queueFacts struct {
	Grants, Crashed, Bumped, Cancelled, Completed int
	GuardedWrites                                 int
	MaxGrantGapMs                                 int64
	LostHolders                                   int
	MinDeadlineToNextGrantMs                      int64
}

// checkQueue loads the history of queueRes and checks it (see
// checkQueueHistory). A stallBound of 0 skips the stall check.
func checkQueue(t *testing.T, ctx context.Context, admin *pgxpool.Pool, r *queueRun, stallBound time.Duration, v *violations) queueFacts {
	t.Helper()
	var h queueHistory
	rows, err := admin.Query(ctx, `SELECT id, ticket, event, at FROM sentinel.queue_events WHERE resource = $1 ORDER BY id`, queueRes)
	require.NoError(t, err)
	for rows.Next() {
		var e qevent
		require.NoError(t, rows.Scan(&e.id, &e.ticket, &e.typ, &e.at))
		h.events = append(h.events, e)
	}
	require.NoError(t, rows.Err())
	wrows, err := admin.Query(ctx, `SELECT ticket, at FROM turn_log WHERE resource = $1 ORDER BY id`, queueRes)
	require.NoError(t, err)
	for wrows.Next() {
		var w qwrite
		require.NoError(t, wrows.Scan(&w.ticket, &w.at))
		h.writes = append(h.writes, w)
	}
	require.NoError(t, wrows.Err())
	r.mu.Lock()
	h.served = map[int64]bool{}
	for tk := range r.served {
		h.served[tk] = true
	}
	h.dones = slices.Clone(r.dones)
	for i, d := range h.dones {
		if call, ok := r.releaseCall[d.ticket]; ok && call < d.deadline {
			h.dones[i].deadline = call
		}
	}
	logs := map[int64][]string{}
	for k, l := range r.log {
		logs[k] = slices.Clone(l)
	}
	r.mu.Unlock()
	h.log = func(tk int64) string { return strings.Join(logs[tk], "\n    ") }
	return checkQueueHistory(h, stallBound, v)
}

// queueHistory is what checkQueueHistory judges: the queue's events and
// the guarded writes in commit order (from the database), and what the
// workers reported.
type queueHistory struct {
	events []qevent
	writes []qwrite
	served map[int64]bool // tickets workers were served
	dones  []queueDone    // turns that ended, with when their holder stopped trusting them
	log    func(ticket int64) string
}

type qwrite struct {
	ticket int64
	at     time.Time
}

// checkQueueHistory checks a queue history exactly (see the file comment)
// and reports every violation to v.
func checkQueueHistory(h queueHistory, stallBound time.Duration, v *violations) queueFacts {
	evs := h.events
	var f queueFacts
	drawn := map[int64]int64{} // ticket -> assigned id
	ended := map[int64]qevent{}
	var grants []qevent
	for _, e := range evs {
		switch e.typ {
		case sentinel.QueueAssigned:
			drawn[e.ticket] = e.id
		case sentinel.QueueGranted:
			grants = append(grants, e)
		default:
			if prev, ok := ended[e.ticket]; ok {
				v.add("ticket %d ended twice (%s, %s)", e.ticket, prev.typ, e.typ)
			}
			ended[e.ticket] = e
			switch e.typ {
			case sentinel.QueueCrashed:
				f.Crashed++
			case sentinel.QueueBumped:
				f.Bumped++
			case sentinel.QueueCancelled:
				f.Cancelled++
			case sentinel.QueueCompleted:
				f.Completed++
			}
		}
	}
	f.Grants = len(grants)
	// Grants in event order carry increasing tickets.
	for i := 1; i < len(grants); i++ {
		if grants[i].ticket <= grants[i-1].ticket {
			v.add("ticket %d granted after ticket %d", grants[i].ticket, grants[i-1].ticket)
		}
	}
	// FIFO among live tickets: every lower ticket left before the grant.
	tickets := make([]int64, 0, len(drawn))
	for tk := range drawn {
		tickets = append(tickets, tk)
	}
	slices.Sort(tickets)
	for _, g := range grants {
		for _, l := range tickets {
			if l >= g.ticket {
				break
			}
			e, ok := ended[l]
			if !ok || e.id > g.id {
				state := "still queued"
				if ok {
					state = fmt.Sprintf("%s later (event %d)", e.typ, e.id)
				}
				v.add("FIFO: ticket %d granted (event %d) while lower ticket %d was %s", g.ticket, g.id, l, state)
			}
		}
	}
	// Guarded writes: commit order never goes back to a lower ticket, and
	// each lies within its ticket's turn.
	grantAt := map[int64]int{}
	for i, g := range grants {
		grantAt[g.ticket] = i
	}
	var last int64
	for _, w := range h.writes {
		tk, at := w.ticket, w.at
		f.GuardedWrites++
		if tk < last {
			v.add("guarded write of ticket %d committed after a write of ticket %d", tk, last)
		}
		last = max(last, tk)
		i, ok := grantAt[tk]
		switch {
		case !ok:
			v.add("guarded write of ticket %d, which was never granted", tk)
		case at.Before(grants[i].at):
			v.add("guarded write of ticket %d at %s, before its grant at %s", tk, at, grants[i].at)
		case i+1 < len(grants) && !at.Before(grants[i+1].at):
			v.add("guarded write of ticket %d at %s, after the next grant (ticket %d) at %s", tk, at, grants[i+1].ticket, grants[i+1].at)
		}
	}
	// Every ticket a worker was served is a recorded grant.
	for tk := range h.served {
		if _, ok := grantAt[tk]; !ok {
			v.add("worker was served ticket %d, which has no grant event", tk)
		}
	}
	dones := h.dones
	// Done first: a lost holder stopped trusting its turn (its deadline,
	// or its Release call if that came first) before the next grant.
	f.MinDeadlineToNextGrantMs = -1
	for _, d := range dones {
		if d.kind != "lost" {
			continue
		}
		i, ok := grantAt[d.ticket]
		if !ok || i+1 >= len(grants) {
			continue
		}
		f.LostHolders++
		next := grants[i+1]
		gap := next.at.UnixNano() - d.deadline
		if gap < 0 {
			lines := ""
			if h.log != nil {
				lines = h.log(d.ticket)
			}
			v.add("holder of ticket %d trusted its turn until %s, after ticket %d was granted at %s; its lines:\n    %s",
				d.ticket, time.Unix(0, d.deadline).UTC().Format(time.RFC3339Nano), next.ticket, next.at.UTC().Format(time.RFC3339Nano), lines)
		}
		if ms := gap / 1e6; f.MinDeadlineToNextGrantMs < 0 || ms < f.MinDeadlineToNextGrantMs {
			f.MinDeadlineToNextGrantMs = ms
		}
	}
	// No stall.
	for i := 1; i < len(grants); i++ {
		gap := grants[i].at.Sub(grants[i-1].at)
		f.MaxGrantGapMs = max(f.MaxGrantGapMs, gap.Milliseconds())
		if stallBound > 0 && gap > stallBound {
			v.add("stall: %s between the grants of tickets %d and %d (bound %s)", gap.Round(time.Millisecond),
				grants[i-1].ticket, grants[i].ticket, stallBound)
		}
	}
	return f
}

// queueCluster starts a cluster with the schema and turn_log, and returns
// it with an admin pool.
func queueCluster(t *testing.T) (*pgtemp.Cluster, *pgxpool.Pool) {
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	_, err := admin.Exec(ctxT(t, time.Minute), turnLogTable)
	require.NoError(t, err)
	return cl, admin
}

func sameURL(url string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = url
	}
	return out
}

// warmUp waits until the workers are taking turns.
func (r *queueRun) warmUp(t *testing.T) {
	for range 3 {
		if _, ok := r.nextServed(30 * time.Second); !ok {
			t.Fatal("the queue made no progress within 30s")
		}
	}
}

func TestQueueKill(t *testing.T) {
	qp := qprof()
	ctx := ctxT(t, 20*time.Minute)
	cl, admin := queueCluster(t)
	r := newQueueRun(t, sameURL(cl.URL(), qp.Workers))
	r.warmUp(t)
	var v violations
	kinds := map[string]int{}
	for i := range qp.Kills {
		slot, kind := r.pickVictim(i)
		kinds[kind]++
		r.workers[slot].kill()
		<-r.workers[slot].exited
		r.mu.Lock()
		delete(r.holder, slot)
		r.mu.Unlock()
		r.spawn(slot)
		require.NoError(t, sleepCtx(ctx, time.Duration(300+rand.IntN(700))*time.Millisecond))
	}
	r.warmUp(t)
	for _, w := range r.workers {
		w.stop()
	}
	f := checkQueue(t, ctx, admin, r, queueTTL+queueHoldMax+time.Second, &v)
	report(t, "queue-kill", map[string]any{"workers": qp.Workers, "kills": kinds, "facts": f, "violations": v.count()})
	v.require(t)
	require.Positive(t, f.Crashed, "no killed holder was recorded as crashed: the scenario did not test what it claims")
}

func TestQueuePause(t *testing.T) {
	qp := qprof()
	ctx := ctxT(t, 20*time.Minute)
	cl, admin := queueCluster(t)
	r := newQueueRun(t, sameURL(cl.URL(), qp.Workers))
	r.warmUp(t)
	var v violations
	kinds := map[string]int{}
	for i := range qp.Stops {
		slot, kind := r.pickVictim(i)
		kinds[kind]++
		w := r.workers[slot]
		require.NoError(t, w.signal(syscall.SIGSTOP))
		waitStopped(t, w.pid)
		time.Sleep(queueTTL * 3 / 2)
		require.NoError(t, w.signal(syscall.SIGCONT))
		require.NoError(t, sleepCtx(ctx, time.Duration(500+rand.IntN(500))*time.Millisecond))
	}
	r.warmUp(t)
	for _, w := range r.workers {
		w.stop()
	}
	f := checkQueue(t, ctx, admin, r, queueTTL*3/2+queueHoldMax+time.Second, &v)
	r.mu.Lock()
	writes := maps(r.writes)
	r.mu.Unlock()
	report(t, "queue-pause", map[string]any{"workers": qp.Workers, "stops": kinds, "facts": f, "writes": writes, "violations": v.count()})
	v.require(t)
	require.Positive(t, f.LostHolders, "no paused holder lost its turn: the scenario did not test what it claims")
}

func TestQueueDatabaseRestart(t *testing.T) {
	qp := qprof()
	ctx := ctxT(t, 20*time.Minute)
	cl, admin := queueCluster(t)
	r := newQueueRun(t, sameURL(cl.URL(), qp.Workers))
	r.warmUp(t)
	var v violations
	var recovery []int64
	for i := range qp.Restarts {
		require.NoError(t, cl.Stop(ctx, "immediate"), "restart %d", i)
		if i%2 == 1 {
			time.Sleep(queueTTL * 3 / 2) // down past the TTL: every ticket dies
		}
		require.NoError(t, cl.Start(ctx), "restart %d", i)
		up := time.Now()
		if _, ok := r.nextServed(30 * time.Second); !ok {
			v.add("restart %d: no turn served within 30s of the server coming back", i)
		}
		recovery = append(recovery, time.Since(up).Milliseconds())
		require.NoError(t, sleepCtx(ctx, time.Duration(500+rand.IntN(1000))*time.Millisecond))
	}
	r.warmUp(t)
	for _, w := range r.workers {
		w.stop()
	}
	f := checkQueue(t, ctx, admin, r, 0, &v)
	r.mu.Lock()
	turnErr := r.turnErr
	r.mu.Unlock()
	report(t, "queue-restart", map[string]any{"workers": qp.Workers, "restarts": qp.Restarts, "recovery_ms": recovery,
		"turn_errors": turnErr, "facts": f, "violations": v.count()})
	v.require(t)
}

func TestQueueNetworkFaults(t *testing.T) {
	qp := qprof()
	ctx := ctxT(t, 20*time.Minute)
	cl, admin := queueCluster(t)
	target := fmt.Sprintf("127.0.0.1:%d", cl.Port())
	proxies := make([]*netfault.Proxy, qp.Workers)
	urls := make([]string, qp.Workers)
	for i := range proxies {
		px, err := netfault.Listen(target)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		proxies[i] = px
		urls[i] = fmt.Sprintf("postgres://postgres@%s/sentinel?sslmode=disable", px.Addr())
	}
	r := newQueueRun(t, urls)
	r.warmUp(t)
	var v violations
	type trial struct {
		Kind      string
		Victim    int
		Ticket    int64
		VictimOut string // how the victim's turn ended: lost, released
		Takeover  bool   // another worker was served during the fault
	}
	var trials []trial
	kinds := []string{"latency", "reset", "blackhole"}
	for i := range qp.NetTrials * len(kinds) {
		kind := kinds[i%len(kinds)]
		slot, ok := r.nextServed(30 * time.Second)
		if !ok {
			t.Fatalf("trial %d: no grant within 30s", i)
		}
		r.mu.Lock()
		tk := r.holder[slot]
		r.mu.Unlock()
		px := proxies[slot]
		for len(r.servedC) > 0 {
			<-r.servedC
		}
		switch kind {
		case "latency":
			px.SetLatency(queueTTL * 3 / 2)
			time.Sleep(3 * queueTTL)
		case "reset":
			for end := time.Now().Add(2 * queueTTL); time.Now().Before(end); {
				px.ResetAll()
				time.Sleep(100 * time.Millisecond)
			}
		case "blackhole":
			px.Blackhole()
			time.Sleep(queueTTL * 5 / 2)
		}
		takeover := len(r.servedC) > 0
		px.Heal()
		out := ""
		r.mu.Lock()
		for _, d := range r.dones {
			if d.ticket == tk {
				out = d.kind
			}
		}
		r.mu.Unlock()
		trials = append(trials, trial{Kind: kind, Victim: slot, Ticket: tk, VictimOut: out, Takeover: takeover})
		time.Sleep(queueTTL)
	}
	r.warmUp(t)
	for _, w := range r.workers {
		w.stop()
	}
	f := checkQueue(t, ctx, admin, r, 0, &v)
	report(t, "queue-network", map[string]any{"workers": qp.Workers, "trials": trials, "facts": f, "violations": v.count()})
	v.require(t)
	lostBlackholed := 0
	for _, tr := range trials {
		if tr.Kind == "blackhole" && tr.VictimOut == "lost" {
			lostBlackholed++
		}
	}
	if lostBlackholed == 0 {
		t.Errorf("no blackholed holder lost its turn: the scenario did not test what it claims")
	}
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}
