package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// report is everything one run measured.
type report struct {
	opts      options
	env       envInfo
	groups    []*group
	handovers []handoverResult
	scale     *scaleResult
	million   *millionResult
	election  *electionSection
	queue     *queueSection
	many      []*group // the many-callers section (many.go)
	peers     *peersSection
	crash     *crashSection
	river     *riverSection
	total     time.Duration
}

// Implementation name prefixes, to find cells in a group.
const (
	nameFloor    = "floor"
	nameSentinel = "sentinel"
	// nameSentinelReplayCold: a replay of a key the client does not
	// remember as completed (setupSentinelReplayCold).
	nameSentinelReplayCold = "sentinel.Once (replay, key not remembered: the claim statement)"
	namePglock             = "cirello.io/pglock"
	nameAdvisory           = "pg_advisory"
)

func (r *report) group(op string, workers int) *group {
	for _, g := range r.groups {
		if g.op == op && g.workers == workers {
			return g
		}
	}
	return nil
}

func (r *report) handover(prefix string, workers int) *handoverResult {
	for i := range r.handovers {
		h := &r.handovers[i]
		if h.workers == workers && strings.HasPrefix(h.name, prefix) {
			return h
		}
	}
	return nil
}

func (r *report) seqWorkers() int { return r.opts.workers[0] }
func (r *report) parWorkers() int { return slices.Max(r.opts.workers) }

// vs formats "ops/s ratio · p50 ratio" of a against base (medians of the
// per-round ratios).
func vs(a, base *cellResult) string {
	if a == nil || base == nil || a == base {
		return ""
	}
	o, p := versus(a, base)
	return fmtRatio(o) + " · " + fmtRatio(p)
}

func fmtStmts(s *sample) string {
	v := s.stmtsPerOp()
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

func (r *report) String() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := r.env
	p("## Run\n\n")
	p("- date: %s; total run time %s\n", e.when, r.total.Round(time.Second))
	p("- machine: %s, %d CPUs (GOMAXPROCS %d), memory %s, Linux %s, %s\n", e.cpu, e.nproc, e.gomaxprocs, e.memTotal, e.kernel, e.goVersion)
	p("- PostgreSQL: %s\n", e.server)
	p("- server: %s; %s\n", e.source, strings.Join(e.settings, ", "))
	p("- each figure: %s of measurement per implementation and worker count, in %d rounds interleaved with the other implementations of the same row group, after a %s warm-up; pools of %d connections\n",
		r.opts.duration, r.opts.rounds, r.opts.warmup, slices.Max(r.opts.workers)+2)
	p("- pglock %s: lease %s, heartbeat %s (its defaults are %s and %s)\n", pglockVersion, r.opts.pglockLease, r.opts.pglockHeartbeat, "20s", "5s")
	p("- DBOS Transact Go %s (github.com/dbos-inc/dbos-transact-golang): its system database is a database of its own on the same server, created and dropped by the run\n", dbosVersion)
	p("- River %s (github.com/riverqueue/river, riverpgxv5): its tables are in a schema of their own, created, migrated and dropped by the run\n\n", riverVersion)

	r.sideBySide(p)
	r.peersReport(p)
	if r.river != nil {
		p("%s", r.river.markdown(r.opts))
	}
	r.manyReport(p)

	p("## Throughput and latency\n\n")
	p("Absolute figures pool all rounds. Ratios are this row's ops/s and p50 divided by the baseline's, computed per round (the two ran next to each other) and reported as the median over the %d rounds: ops/s above 1 is better, p50 below 1 is better.\n\n", r.opts.rounds)
	t := newTable("operation", ">workers", "implementation", ">ops/s", ">p50", ">p99", ">stmts/op", "vs floor (ops/s · p50)", "vs pglock (ops/s · p50)", "vs advisory lock (ops/s · p50)")
	for _, g := range r.groups {
		floor, pgl, adv := g.cell(nameFloor), g.cell(namePglock), g.cell(nameAdvisory)
		for i := range g.cells {
			c := &g.cells[i]
			t.add(g.op, fmt.Sprint(g.workers), c.name, fmtRate(c.s.opsPerSec()), fmtDur(c.s.pct(50)), fmtDur(c.s.pct(99)),
				fmtStmts(&c.s), vs(c, floor), vs(c, pgl), vs(c, adv))
		}
	}
	p("%s\n", t)

	p("## Handover\n\n")
	p("Time from the holder's release call to the waiting acquirer's acquire returning; one holder/waiter pair per worker, each on its own key.\n\n")
	t = newTable(">pairs", "implementation", ">handovers", ">p50", ">p99", ">max", ">p50 vs sentinel", "note")
	for _, h := range r.handovers {
		s := h.s
		cmp := ""
		if sen := r.handover(nameSentinel, h.workers); sen != nil && !strings.HasPrefix(h.name, nameSentinel) {
			cmp = fmtRatio(ratio(float64(s.pct(50)), float64(sen.s.pct(50))))
		}
		t.add(fmt.Sprint(h.workers), h.name, fmt.Sprint(s.ops), fmtDur(s.pct(50)), fmtDur(s.pct(99)), fmtDur(s.pct(100)), cmp, h.note)
	}
	p("%s\n", t)
	var cpuLines []string
	for _, h := range r.handovers {
		if l := cpuPerHandover(&h.s); l != "" && !strings.Contains(h.name, "pglock") { // pglock's rows are mostly its polling sleep
			cpuLines = append(cpuLines, fmt.Sprintf("- %d pair(s), %s: %s", h.workers, h.name, l))
		}
	}
	if len(cpuLines) > 0 {
		p("CPU per handover (the server runs on this machine; its postmaster's processes, from /proc; this process from getrusage; both sides of every pair included):\n\n%s\n\n", strings.Join(cpuLines, "\n"))
	}

	if s := r.scale; s != nil {
		p("## %d leases held by one client\n\n", s.leases)
		p("Default settings but the TTL: %s, renewed every %s. Acquired by 8 goroutines in %s.\n\n", r.opts.leaseTTL, s.renewEvery, s.acquireTime.Round(time.Millisecond))
		t = newTable("figure", ">value")
		t.add("statements sent in a "+s.window.String()+" window", fmt.Sprint(s.stmtsInWindow))
		t.add("heartbeat ticks in the window", fmt.Sprint(len(s.ticks)))
		t.add("most statements in one tick", fmt.Sprint(s.maxStmtsPerTick()))
		t.add("every renewal statement carried all leases", yesNo(s.allLeasesEveryStmt()))
		lat := s.renewLatency()
		t.add("renewal statement latency p50 / max", fmtDur(lat.pct(50))+" / "+fmtDur(lat.pct(100)))
		t.add("client heap, 1 lease held → all held", fmtBytes(float64(s.heapBase))+" → "+fmtBytes(float64(s.heapHeld)))
		t.add("client heap per held lease", fmtBytes(s.bytesPerLease()))
		t.add("goroutines, 1 lease held → all held", fmt.Sprintf("%d → %d", s.gBase, s.gHeld))
		t.add("leases lost while held", fmt.Sprint(s.lost))
		t.add("Close: time / statements", fmt.Sprintf("%s / %d", s.closeTime.Round(time.Millisecond), s.closeStmts))
		t.add("leases still live in the database after Close", fmt.Sprint(s.leftHeld))
		p("%s\n", t)
	}

	if m := r.million; m != nil && m.g != nil {
		p("## Fresh Once with %d completed executions in the table\n\n", m.rows)
		p("One INSERT ... SELECT generate_series (random md5 keys), then VACUUM ANALYZE: %s, table with indexes %s. 1 worker.\n\n",
			m.insertTime.Round(time.Millisecond), m.size)
		t = newTable("executions table", ">ops/s", ">p50", ">p99", ">stmts/op", "vs empty (ops/s · p50)")
		base := &m.g.cells[0]
		for i := range m.g.cells {
			c := &m.g.cells[i]
			t.add(c.name, fmtRate(c.s.opsPerSec()), fmtDur(c.s.pct(50)), fmtDur(c.s.pct(99)), fmtStmts(&c.s), vs(c, base))
		}
		p("%s\n", t)
	}

	if r.election != nil {
		p("%s", r.election.markdown())
	}

	if r.queue != nil {
		p("%s", r.queue.markdown())
	}

	p("## Targets (issues #4, #10, #30)\n\n")
	t = newTable("target", ">measured", ">limit", "result")
	for _, tg := range append(r.targets(), r.election.targets()...) {
		t.add(tg.name, tg.measured, tg.limit, tg.result())
	}
	p("%s\n", t)

	p("## Floor check\n\n")
	for _, line := range r.sqlCheck() {
		p("- %s\n", line)
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func yesNo(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

// targets evaluates the goals of issue #4 on this run's figures.
func (r *report) targets() []target {
	var out []target
	seq, par := r.seqWorkers(), r.parWorkers()
	cells := func(op string, w int, a, b string) (*cellResult, *cellResult) {
		g := r.group(op, w)
		if g == nil {
			return nil, nil
		}
		return g.cell(a), g.cell(b)
	}
	p50 := func(a, base *cellResult) float64 { _, p := versus(a, base); return p }
	ops := func(a, base *cellResult) float64 { o, _ := versus(a, base); return o }

	s, f := cells(opOnceFresh, seq, nameSentinel, nameFloor)
	out = append(out, ratioTarget(fmt.Sprintf("Once fresh latency (p50), %s, vs floor", plural(seq, "worker")), p50(s, f), 1.15, true))
	s, f = cells(opOnceFresh, par, nameSentinel, nameFloor)
	out = append(out, ratioTarget(fmt.Sprintf("Once fresh throughput, %s, vs floor", plural(par, "worker")), ops(s, f), 0.85, false))
	s, f = cells(opOnceReplay, seq, nameSentinel, nameFloor)
	out = append(out, ratioTarget(fmt.Sprintf("Once replay latency (p50), %s, vs one PK SELECT", plural(seq, "worker")), p50(s, f), 1.2, true))
	for _, w := range []int{seq, par} {
		s, pg := cells(opLease, w, nameSentinel, namePglock)
		out = append(out, ratioTarget(fmt.Sprintf("lease acquire+release throughput, %s, vs pglock", plural(w, "worker")), ops(s, pg), 1.5, false))
		if w == par {
			break
		}
	}
	for _, w := range []int{seq, par} {
		tg := target{name: fmt.Sprintf("handover p50, %s", plural(w, "pair")), limit: "≤ 5 ms", missing: true}
		if h := r.handover(nameSentinel, w); h != nil && h.s.ops > 0 {
			d := h.s.pct(50)
			tg.measured, tg.ok, tg.missing = fmtDur(d), d <= 5*time.Millisecond, false
		}
		out = append(out, tg)
		if w == par {
			break
		}
	}
	for _, w := range []int{seq, par} {
		limit := time.Millisecond
		if w > 1 {
			limit = 1500 * time.Microsecond
		}
		tg := target{name: fmt.Sprintf("handover (issue 30) p50, %s", plural(w, "pair")), limit: "≤ " + fmtDur(limit), missing: true}
		if h := r.handover(nameSentinel, w); h != nil && h.s.ops > 0 {
			d := h.s.pct(50)
			tg.measured, tg.ok, tg.missing = fmtDur(d), d <= limit, false
		}
		out = append(out, tg)
		if w == par {
			break
		}
	}
	if sc := r.scale; sc != nil {
		tg := target{name: fmt.Sprintf("%d leases: statements per heartbeat tick", sc.leases), limit: "1, carrying every lease"}
		tg.measured = fmt.Sprintf("%d (in %d ticks)", sc.maxStmtsPerTick(), len(sc.ticks))
		tg.ok = sc.maxStmtsPerTick() == 1 && sc.allLeasesEveryStmt() && int64(len(sc.renewStmts)) == sc.stmtsInWindow
		tg.missing = len(sc.ticks) == 0
		out = append(out, tg)
		bpl := sc.bytesPerLease()
		out = append(out, target{name: fmt.Sprintf("%d leases: client heap per held lease", sc.leases),
			measured: fmtBytes(bpl), limit: "< 1 KiB", ok: bpl < 1024, missing: bpl <= 0})
		extra := sc.gHeld - sc.gBase
		out = append(out, target{name: fmt.Sprintf("%d leases: goroutines added (1 lease → all)", sc.leases),
			measured: fmt.Sprint(extra), limit: "none per lease (≤ 5)", ok: extra <= 5})
	}
	if m := r.million; m != nil && m.g != nil && len(m.g.cells) == 2 {
		out = append(out, ratioTarget(fmt.Sprintf("Once fresh latency (p50) with %d completed rows vs empty", m.rows),
			p50(&m.g.cells[1], &m.g.cells[0]), 1.2, true))
	}
	out = append(out, r.queue.targets()...)
	return out
}

// sqlCheck compares the statements the floor sends with the ones the
// library sent for the same operation (recorded during warm-up).
func (r *report) sqlCheck() []string {
	var out []string
	for _, g := range r.groups {
		if g.workers != r.seqWorkers() {
			continue
		}
		f, s := g.cell(nameFloor), g.cell(nameSentinel)
		if f == nil || s == nil {
			continue
		}
		if g.op == opOnceReplay {
			// The replay's floor is the target's baseline, a primary-key
			// SELECT of the row; the library replays a key it saw
			// completed with a primary-key read of its own, and one it
			// does not remember with its claim statement, which then
			// only reads.
			cold := 0
			if cc := g.cell(nameSentinelReplayCold); cc != nil {
				cold = len(cc.sqls)
			}
			out = append(out, fmt.Sprintf("%s: the floor is one primary-key SELECT of the row (the target's baseline); the library sent %d distinct statement(s) replaying keys it saw completed, %d replaying keys it did not remember.", g.op, len(s.sqls), cold))
			continue
		}
		var missing, extra []string
		for _, q := range s.sqls {
			if !slices.Contains(f.sqls, q) {
				extra = append(extra, abbrev(q))
			}
		}
		for _, q := range f.sqls {
			if !slices.Contains(s.sqls, q) {
				missing = append(missing, abbrev(q))
			}
		}
		if len(missing) == 0 && len(extra) == 0 {
			out = append(out, fmt.Sprintf("%s: the library sent %d distinct statement(s), identical to the floor's.", g.op, len(s.sqls)))
			continue
		}
		out = append(out, fmt.Sprintf("%s: **the floor is stale**: the library sent %q that the floor does not, and not %q; update bench/floor_sql.go.",
			g.op, extra, missing))
	}
	return out
}

func abbrev(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 70 {
		q = q[:70] + "…"
	}
	return q
}
