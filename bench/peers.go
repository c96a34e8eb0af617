package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Sentinel beside DBOS Transact Go for "run this payment exactly once on
// Postgres": a fresh payment and a repeat of the same key by a lone caller,
// and fresh payments by many callers on equal pools, interleaved over
// rounds. The crash table (crash.go) completes the side-by-side table that
// leads the report.

// Operations of the section.
const (
	opPayFresh  = "payment, fresh key"
	opPayRepeat = "payment, same key again"
)

type peersSection struct {
	pool   int
	groups []*group
}

func (s *peersSection) group(op string, callers int) *group {
	if s == nil {
		return nil
	}
	for _, g := range s.groups {
		if g.op == op && g.workers == callers {
			return g
		}
	}
	return nil
}

// as runs setup for op whatever operation its group is named after.
func as(op string, setup setupFunc) setupFunc {
	return func(ctx context.Context, _ string, workers int) (*impl, error) { return setup(ctx, op, workers) }
}

// peerPool is the pool of every implementation in the section.
func (o options) peerPool() int {
	if o.manyPool > 0 {
		return o.manyPool
	}
	return 8
}

// peersBench runs the section.
func (b *bench) peersBench(ctx context.Context) (*peersSection, error) {
	sec := &peersSection{pool: b.opts.peerPool()}
	saved := b.maxConns
	b.maxConns = sec.pool
	defer func() { b.maxConns = saved }()
	type run struct {
		op, under string
		callers   int
	}
	runs := []run{{opPayFresh, opOnceFresh, 1}, {opPayRepeat, opOnceReplay, 1}}
	for _, n := range b.opts.peerCallers {
		if n != 1 {
			runs = append(runs, run{opPayFresh, opOnceFresh, n})
		}
	}
	for _, r := range runs {
		b.progress("Sentinel vs DBOS: %s, %d caller(s), pool %d", r.op, r.callers, sec.pool)
		g, err := b.runGroup(ctx, r.op, r.callers, []setupFunc{as(r.under, b.setupSentinel), as(r.under, b.setupDBOS)})
		if err != nil {
			return nil, err
		}
		sec.groups = append(sec.groups, g)
	}
	return sec, nil
}

// sideBySide renders the table that leads the report: the crash rows, then
// latency and throughput, one column per library (and per Sentinel mode of
// the crash table).
func (r *report) sideBySide(p func(string, ...any)) {
	if r.peers == nil && r.crash == nil {
		return
	}
	modes := crashModes()
	p("## Sentinel vs %s: run this payment exactly once\n\n", nameDBOS)
	p("One run, one server, rounds interleaved. Crash rows: a worker process is SIGKILLed in the middle of a payment, the payment is retried as each library documents (below), and a provider table counts the charges (%s per row). Latency and throughput: every library with a pool of %d connections doing the work (DBOS gets one more, which it holds for LISTEN); ratios are medians of per-round ratios.\n\n",
		r.crashTrialsText(), r.opts.peerPool())
	cols := []string{""}
	for _, m := range modes {
		cols = append(cols, m.name)
	}
	cols = append(cols, "ratio")
	t := newTable(cols...)
	if r.crash != nil {
		for _, kill := range []string{killInFlight, killAfterReturn} {
			for _, prov := range []string{providerPlain, providerIdempotent} {
				row := []string{fmt.Sprintf("SIGKILL %s, %s provider", kill, prov)}
				for _, m := range modes {
					row = append(row, r.crash.cell(m.lib, kill, prov).summary())
				}
				t.add(append(row, "")...)
			}
		}
	}
	if s := r.peers; s != nil {
		perf := func(label string, g *group, value func(*cellResult) string, ratio func(sen, dbos *cellResult) string) {
			if g == nil {
				return
			}
			sen, db := g.cell(nameSentinel), g.cell(nameDBOS)
			row := []string{label}
			for _, m := range modes {
				switch m.lib {
				case "sentinel":
					row = append(row, value(sen))
				case "sentinel-rerun":
					row = append(row, "(as sentinel.Once)")
				case "dbos":
					row = append(row, value(db))
				default:
					row = append(row, "")
				}
			}
			t.add(append(row, ratio(sen, db))...)
		}
		p50 := func(c *cellResult) string { return fmtDur(c.s.pct(50)) }
		faster := func(sen, db *cellResult) string {
			_, x := versus(db, sen)
			return fmtRatio(x) + " faster"
		}
		perf("fresh payment p50, lone caller", s.group(opPayFresh, 1), p50, faster)
		perf("repeat with the same key p50", s.group(opPayRepeat, 1), p50, faster)
		for _, g := range s.groups {
			if g.op != opPayFresh || g.workers == 1 {
				continue
			}
			perf(fmt.Sprintf("%d callers, pool %d", g.workers, s.pool), g,
				func(c *cellResult) string { return fmtRate(c.s.opsPerSec()) + " ops/s" },
				func(sen, db *cellResult) string { o, _ := versus(sen, db); return fmtRatio(o) })
		}
	}
	p("%s\n", t)
	if r.crash != nil {
		p("How each library retries a payment after its worker was killed (the worker is restarted at once):\n\n")
		for _, m := range modes {
			p("- %s: %s.\n", m.name, m.retry)
		}
		p("\n")
	}
}

func (r *report) crashTrialsText() string {
	if r.crash == nil || len(r.crash.cells) == 0 {
		return "not run"
	}
	return plural(r.crash.cells[0].trials, "trial")
}

// summary is a crash cell as the side-by-side table shows it.
func (c *crashCell) summary() string {
	if c == nil || c.trials == 0 {
		return "not measured"
	}
	s := fmt.Sprintf("%d charged twice, %d left for an operator, %d reported success", c.twice, c.operator, c.success)
	if len(c.other) > 0 {
		s += fmt.Sprintf(", %d other", len(c.other))
	}
	return s + "; outcome in " + fmtDur(c.toResult.pct(50))
}

// peersReport renders the section's details and the crash table.
func (r *report) peersReport(p func(string, ...any)) {
	if s := r.peers; s != nil {
		p("### Latency and throughput, Sentinel vs %s\n\n", nameDBOS)
		p("Sentinel: `sentinel.Once` with a key per payment. DBOS %s: a workflow (`RunWorkflow` with `WithWorkflowID(key)`, then `GetResult`) of one step (`RunAsStep`) that charges; its system database is a database of its own on the same server, created and dropped by the run. Pools: %d connections for Sentinel, %d for DBOS, which holds one of them for LISTEN while it runs. %d rounds of %s per row, after a %s warm-up.\n\n",
			dbosVersion, s.pool, s.pool+1, r.opts.rounds, (r.opts.duration / time.Duration(r.opts.rounds)).String(), r.opts.warmup)
		t := newTable("operation", ">callers", "implementation", ">ops/s", ">p50", ">p99", ">stmts/op", "vs DBOS (ops/s · p50)")
		for _, g := range s.groups {
			db := g.cell(nameDBOS)
			for i := range g.cells {
				c := &g.cells[i]
				t.add(g.op, fmt.Sprint(g.workers), c.name, fmtRate(c.s.opsPerSec()), fmtDur(c.s.pct(50)), fmtDur(c.s.pct(99)), fmtStmts(&c.s), vs(c, db))
			}
		}
		p("%s\n", t)
	}
	if s := r.crash; s != nil {
		p("### Crash table\n\n")
		p("A worker process runs one payment and is SIGKILLed %q (the provider charged; fn had not returned) or %q (fn returned; the library had not recorded it). A new worker process retries the payment as the library documents. Sentinel's lease TTL: %s. The provider is a table on the same server: %q charges every request; %q charges once per reference and returns the first charge to a repeat.\n\n",
			killInFlight, killAfterReturn, s.ttl, providerPlain, providerIdempotent)
		t := newTable("library", "kill", "provider", ">trials", ">charged twice", ">left for an operator", ">reported success", ">other", ">provider requests", ">outcome p50", ">max")
		for _, c := range s.cells {
			t.add(c.mode.name, c.kill, c.provider, fmt.Sprint(c.trials), fmt.Sprint(c.twice), fmt.Sprint(c.operator), fmt.Sprint(c.success),
				fmt.Sprint(len(c.other)), fmt.Sprint(c.requests), fmtDur(c.toResult.pct(50)), fmtDur(c.toResult.pct(100)))
		}
		p("%s\n", t)
		for _, c := range s.cells {
			if len(c.other) > 0 {
				p("- %s, %s, %s provider, other outcomes: %s\n", c.mode.name, c.kill, c.provider, strings.Join(c.other[:min(3, len(c.other))], "; "))
			}
		}
		p("\n")
	}
}
