package faults

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/netfault"
)

// Scenario 5: three elector processes campaign for one group, each through
// its own TCP proxy, while the driver hits the current leader: SIGKILL,
// SIGSTOP past the TTL, an immediate restart of the server, latency beyond
// the TTL on its path, repeated connection resets, a blackhole, and a
// graceful Resign. Every leader writes to guarded_log every 20ms, each
// write guarded by its term (VerifyTerm in the write's transaction), and
// logs its tenure: [OnElected started, OnElected's ctx cancelled].
// Properties: terms strictly increase in election order; no tenure begins
// before the previous one ended (unless the previous leader was frozen by
// SIGSTOP at that moment: a paused process cannot learn anything, which is
// what the term guard is for); no guarded write of a term commits after a
// write of a later term; every guarded write attempted after a later term
// began is refused; after a crash a new leader is elected within TTL + 1s.

const electionTTL = time.Second

const electionGroup = "faults"

func init() {
	// Elector worker processes are dispatched here, before TestMain, so the
	// shared worker switch needs no case for them.
	if os.Getenv(workerEnv) != "elector" {
		return
	}
	cmds := make(chan string, 16)
	go func() { // stdin: commands; EOF means the driver is gone
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
		os.Exit(3)
	}()
	if err := electorWorker(cmds); err != nil {
		fmt.Fprintf(os.Stderr, "worker elector: %v\n", err)
		emit("fatal %s", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	os.Exit(0)
}

// electorWorker runs an elector until killed. While leading it writes a
// guarded row every 20ms (each write on a ctx of its own, so a write in
// flight when leadership ends still completes, guarded). After each term
// it tries one more write with the old term (a stale probe). Command
// "resign" resigns. Output lines (times: wall-clock nanoseconds, the one
// clock the processes share):
//
//	start PID
//	elected TERM WALL
//	ctxdone TERM WALL
//	write TERM ok|refused|error CALL RET
//	probe TERM ok|refused|error CALL RET
//	resigned WALL
func electorWorker(cmds <-chan string) error {
	ctx := context.Background()
	name := os.Getenv("SF_NAME")
	cfg, err := pgxpool.ParseConfig(os.Getenv("SF_DB"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := sentinel.New(pool, &sentinel.Config{
		DefaultTTL: envDuration("SF_TTL", electionTTL), WaitRecheck: 200 * time.Millisecond,
		Owner: fmt.Sprintf("%s-pid%d", name, os.Getpid()),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	write := func(kind string, term int64) {
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		call := wall()
		res := guardedTermWrite(wctx, pool, c, term, name)
		emit("%s %d %s %d %d", kind, term, res, call, wall())
	}
	el, err := c.Elector(electionGroup, sentinel.ElectorOptions{
		OnElected: func(ctx context.Context, term int64) {
			emit("elected %d %d", term, wall())
			ctxDone := func() { emit("ctxdone %d %d", term, wall()) }
			stop := context.AfterFunc(ctx, ctxDone)
			for ctx.Err() == nil {
				write("write", term)
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
			// ctx.Err() can be seen before the AfterFunc started; then
			// stop wins and the line is ours to write.
			if stop() {
				ctxDone()
			}
		},
		OnDemoted: func(term int64) { write("probe", term) },
	})
	if err != nil {
		return err
	}
	go func() {
		for cmd := range cmds {
			if cmd == "resign" {
				_ = el.Resign(ctx)
				emit("resigned %d", wall())
			}
		}
	}()
	emit("start %d", os.Getpid())
	return el.Run(ctx)
}

// guardedTermWrite writes one guarded_log row in a transaction that first
// checks the term with VerifyTerm: "ok", "refused" or "error".
func guardedTermWrite(ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, term int64, writer string) string {
	return guardedLogWrite(ctx, pool, func(tx pgx.Tx) error { return c.VerifyTerm(ctx, tx, electionGroup, term) }, "election", term, writer, nil)
}

// eTenure is one term as the driver saw it.
type eTenure struct {
	slot, pid      int
	term           int64
	elected, ended int64 // wall ns; ended 0 while running
	endKind        string
}

type eWrite struct {
	probe     bool
	term      int64
	res       string
	call, ret int64
}

// electionRun is the driver's record of everything the workers said.
type electionRun struct {
	mu      sync.Mutex
	tenures map[int64]*eTenure
	writes  []eWrite
	pauses  map[int][][2]int64 // pid -> [SIGSTOP, SIGCONT] windows
	errs    []string
	log     []string // every line but writes, for a failure's diagnosis
}

func (r *electionRun) onLine(slot int) func(*child, string) {
	return func(c *child, line string) {
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
		if f[0] != "write" {
			r.log = append(r.log, fmt.Sprintf("%d slot%d pid%d %s", wall(), slot, c.pid, line))
		}
		switch f[0] {
		case "elected":
			r.tenures[num(1)] = &eTenure{slot: slot, pid: c.pid, term: num(1), elected: num(2)}
		case "ctxdone":
			if tn := r.tenures[num(1)]; tn != nil && tn.ended == 0 {
				tn.ended, tn.endKind = num(2), "ctx"
			}
		case "write", "probe":
			r.writes = append(r.writes, eWrite{probe: f[0] == "probe", term: num(1), res: f[2], call: num(3), ret: num(4)})
		case "fatal":
			r.errs = append(r.errs, line)
		}
	}
}

// leader returns the running tenure with the highest term, if any.
func (r *electionRun) leader() *eTenure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *eTenure
	for _, tn := range r.tenures {
		if tn.ended == 0 && (best == nil || tn.term > best.term) {
			best = tn
		}
	}
	if best == nil {
		return nil
	}
	cp := *best
	return &cp
}

// electedAfter returns the first tenure with a term above term.
func (r *electionRun) electedAfter(term int64) *eTenure {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first *eTenure
	for _, tn := range r.tenures {
		if tn.term > term && (first == nil || tn.term < first.term) {
			first = tn
		}
	}
	if first == nil {
		return nil
	}
	cp := *first
	return &cp
}

// killed records that a tenure's process died at wall time at.
func (r *electionRun) killed(pid int, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tn := range r.tenures {
		if tn.pid == pid && tn.ended == 0 {
			tn.ended, tn.endKind = at, "killed"
		}
	}
}

type electionCheck struct {
	Tenures, PausedOverlaps, GuardedOK, StaleRefused, Probes, ProbesRefused int
	MinGapMs                                                                float64
}

// check verifies the properties; see the scenario's comment.
func (r *electionRun) check(t *testing.T, ctx context.Context, admin *pgxpool.Pool, v *violations) electionCheck {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out electionCheck
	ts := make([]*eTenure, 0, len(r.tenures))
	for _, tn := range r.tenures {
		ts = append(ts, tn)
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].elected < ts[j].elected })
	out.Tenures = len(ts)
	out.MinGapMs = -1
	for i := 1; i < len(ts); i++ {
		prev, cur := ts[i-1], ts[i]
		if cur.term <= prev.term {
			v.add("term %d elected after term %d", cur.term, prev.term)
		}
		if prev.ended == 0 || cur.elected <= prev.ended {
			paused := false
			for _, w := range r.pauses[prev.pid] {
				// Frozen within the TTL before the next election: its
				// deadline passed while it could not run.
				if w[0] <= cur.elected && cur.elected-int64(electionTTL) <= w[1] {
					paused = true
				}
			}
			if paused {
				out.PausedOverlaps++
				continue
			}
			v.add("term %d (slot %d) elected at %d while term %d (slot %d) still led (ended %d, %s)",
				cur.term, cur.slot, cur.elected, prev.term, prev.slot, prev.ended, prev.endKind)
			continue
		}
		gap := float64(cur.elected-prev.ended) / 1e6
		if out.MinGapMs < 0 || gap < out.MinGapMs {
			out.MinGapMs = gap
		}
	}
	// A write attempted after a later term began must be refused.
	for _, w := range r.writes {
		if w.probe {
			out.Probes++
			if w.res == "refused" {
				out.ProbesRefused++
			}
		}
		later := false
		for _, tn := range ts {
			if tn.term > w.term && tn.elected < w.call {
				later = true
				break
			}
		}
		switch {
		case later && w.res == "ok":
			v.add("a write of term %d began at %d, after a later term was elected, and was accepted", w.term, w.call)
		case later && w.res == "refused":
			out.StaleRefused++
		case w.res == "ok":
			out.GuardedOK++
		}
	}
	// In commit order (guarded_log's identity is taken under the term's
	// row lock), terms never go back.
	rows, err := admin.Query(ctx, `SELECT id, token FROM guarded_log WHERE key = 'election' ORDER BY id`)
	require.NoError(t, err)
	var maxTerm, atID int64
	for rows.Next() {
		var id, term int64
		require.NoError(t, rows.Scan(&id, &term))
		if term < maxTerm {
			v.add("guarded write %d of term %d committed after write %d of term %d", id, term, atID, maxTerm)
		}
		if term > maxTerm {
			maxTerm, atID = term, id
		}
	}
	require.NoError(t, rows.Err())
	return out
}

func TestElectionFaults(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 20*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	target := fmt.Sprintf("127.0.0.1:%d", cl.Port())
	var v violations
	r := &electionRun{tenures: map[int64]*eTenure{}, pauses: map[int][][2]int64{}}

	const n = 3
	proxies := make([]*netfault.Proxy, n)
	workers := make([]*child, n)
	spawnSlot := func(i int) {
		url := fmt.Sprintf("postgres://postgres@%s/sentinel?sslmode=disable", proxies[i].Addr())
		workers[i] = spawn(t, fmt.Sprintf("e%d", i), "elector", []string{
			"SF_DB=" + url, "SF_NAME=" + fmt.Sprintf("e%d", i), "SF_TTL=" + electionTTL.String(),
		}, r.onLine(i))
	}
	for i := range n {
		px, err := netfault.Listen(target)
		require.NoError(t, err)
		t.Cleanup(func() { _ = px.Close() })
		proxies[i] = px
		spawnSlot(i)
	}
	waitLeader := func(what string) *eTenure {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if l := r.leader(); l != nil && !workers[l.slot].hasExited() {
				return l
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no leader within 30s; workers' stderr:\n%s\n%s\n%s", what,
					workers[0].stderr.tail(10), workers[1].stderr.tail(10), workers[2].stderr.tail(10))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	type kindStats struct {
		Trials, NewTerm int
		FailoverMs      []float64
	}
	stats := map[string]*kindStats{}
	kinds := []string{"kill", "stop", "restart", "latency", "reset", "blackhole", "resign"}
	for i := range p.ElectionTrials * len(kinds) {
		kind := kinds[i%len(kinds)]
		ks := stats[kind]
		if ks == nil {
			ks = &kindStats{}
			stats[kind] = ks
		}
		ks.Trials++
		l := waitLeader(fmt.Sprintf("trial %d (%s)", i, kind))
		time.Sleep(300 * time.Millisecond) // let it write
		w, px := workers[l.slot], proxies[l.slot]
		start := wall()
		switch kind {
		case "kill":
			w.kill()
			<-w.exited
			r.killed(w.pid, wall())
			spawnSlot(l.slot)
		case "stop":
			require.NoError(t, w.signal(syscall.SIGSTOP))
			waitStopped(t, w.pid)
			stopped := wall()
			time.Sleep(electionTTL * 5 / 2)
			cont := wall()
			require.NoError(t, w.signal(syscall.SIGCONT))
			r.mu.Lock()
			r.pauses[w.pid] = append(r.pauses[w.pid], [2]int64{stopped, cont})
			r.mu.Unlock()
		case "restart":
			require.NoError(t, cl.Stop(ctx, "immediate"))
			if (i/len(kinds))%2 == 1 {
				time.Sleep(electionTTL * 3 / 2)
			}
			require.NoError(t, cl.Start(ctx))
		case "latency":
			px.SetLatency(electionTTL * 3 / 2)
			time.Sleep(3 * electionTTL)
			px.Heal()
		case "reset":
			for end := time.Now().Add(2 * electionTTL); time.Now().Before(end); {
				px.ResetAll()
				time.Sleep(100 * time.Millisecond)
			}
			px.Heal()
		case "blackhole":
			px.Blackhole()
			time.Sleep(electionTTL * 5 / 2)
			px.Heal()
		case "resign":
			require.NoError(t, w.send("resign"))
		}
		// The next term, if the fault cost the leader its term.
		deadline := time.Now().Add(15 * time.Second)
		rideOut := time.Now().Add(3 * time.Second)
		for {
			if next := r.electedAfter(l.term); next != nil {
				t.Logf("trial %d (%s): term %d (slot %d) -> term %d (slot %d) after %.0fms", i, kind, l.term, l.slot, next.term, next.slot, float64(next.elected-start)/1e6)
				ks.NewTerm++
				ks.FailoverMs = append(ks.FailoverMs, float64(next.elected-start)/1e6)
				if kind == "kill" && time.Duration(next.elected-start) > electionTTL+time.Second {
					v.add("trial %d: failover after SIGKILL took %s (TTL %s)", i, time.Duration(next.elected-start), electionTTL)
				}
				break
			}
			if (kind == "restart" || kind == "reset") && time.Now().After(rideOut) {
				if cur := r.leader(); cur != nil && cur.term == l.term {
					t.Logf("trial %d (%s): term %d (slot %d) rode the fault out", i, kind, l.term, l.slot)
					break // the leader rode the fault out
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("trial %d (%s): no leader after term %d within 15s", i, kind, l.term)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(electionTTL / 2)
	}
	for _, w := range workers {
		w.kill()
		<-w.exited
		r.killed(w.pid, wall())
	}

	ec := r.check(t, ctx, admin, &v)
	r.mu.Lock()
	errs := slices.Clone(r.errs)
	r.mu.Unlock()
	require.Empty(t, errs, "workers failed")
	if v.count() > 0 {
		r.mu.Lock()
		t.Logf("worker lines:\n%s", strings.Join(r.log, "\n"))
		r.mu.Unlock()
	}
	v.require(t)
	type kindFigures struct {
		Trials, NewTerm          int
		FailoverP50, FailoverMax float64
	}
	figs := map[string]kindFigures{}
	for k, s := range stats {
		f := kindFigures{Trials: s.Trials, NewTerm: s.NewTerm}
		if len(s.FailoverMs) > 0 {
			sort.Float64s(s.FailoverMs)
			f.FailoverP50 = s.FailoverMs[len(s.FailoverMs)/2]
			f.FailoverMax = s.FailoverMs[len(s.FailoverMs)-1]
		}
		figs[k] = f
	}
	report(t, "election", map[string]any{
		"trials": p.ElectionTrials * len(kinds), "ttl_ms": electionTTL.Milliseconds(), "by_kind": figs,
		"tenures": ec.Tenures, "paused_overlaps_excused": ec.PausedOverlaps, "min_gap_ctx_end_to_next_elected_ms": ec.MinGapMs,
		"guarded_writes_ok": ec.GuardedOK, "stale_writes_refused": ec.StaleRefused,
		"stale_probes": ec.Probes, "stale_probes_refused": ec.ProbesRefused, "violations": v.count(),
	})
	if s := stats["stop"]; s != nil && s.NewTerm == 0 {
		t.Errorf("no SIGSTOPped leader was replaced: the scenario did not test what it claims")
	}
	if ec.StaleRefused == 0 {
		t.Errorf("no stale guarded write was attempted: the scenario did not test what it claims")
	}
}
