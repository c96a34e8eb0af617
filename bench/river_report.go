package main

import (
	"fmt"
	"strings"
)

// markdown renders the River section: the cost table, then the crash
// table.
func (s *riverSection) markdown(o options) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	set := s.set
	p("## Sentinel with River: what wrapping a job's charge in `sentinel.Once` costs and buys\n\n")
	p("%s delivers each job at least once. The same payment jobs (distinct payment ids), worked by River alone and by River with the worker's charge inside `sentinel.Once(ctx, client, \"pay/\"+id, fn)`.\n\n", nameRiver)
	if len(s.cost) == 2 {
		plain, once := s.cost[0], s.cost[1]
		p("### Cost\n\n")
		p("Each mode: a River client working a queue of its own with MaxWorkers %d, on a pool of %d connections that, in the Once mode, Sentinel shares (a River user hands Sentinel River's pool): the same pool size and River configuration for both, River's defaults otherwise (FetchCooldown 100ms, FetchPollInterval 1s); neither client is River's leader, so neither runs River's maintenance beside the work. The provider is the DBOS comparison's: in process, counted (%d charges for %d jobs alone, %d for %d with Once). %d rounds, the modes alternating; in each round each mode drains a backlog of %d jobs inserted with one `InsertMany`, then runs %d callers for %s, each inserting one job (`Insert`) and waiting for its completion event (`Subscribe`). Ratios: River + Once over River alone, medians of per-round ratios where the figure has rounds.\n\n",
			set.maxWorkers, set.pool, plain.charges, plain.jobs, once.charges, once.jobs, len(plain.drain.rounds), max(1, set.jobs/max(1, len(plain.drain.rounds))), set.callers, s.round)
		t := newTable("", ">"+plain.name, ">"+once.name, ">ratio")
		dOps, _ := versus(&once.drain, &plain.drain)
		t.add(fmt.Sprintf("backlog of %d jobs: jobs/s, from `InsertMany` to the last completion", plain.drain.s.ops),
			fmtRate(plain.drain.s.opsPerSec()), fmtRate(once.drain.s.opsPerSec()), fmtRatio(dOps))
		t.add("backlog: statements per job (pgx tracer on the pool, River's own included)",
			fmtStmts(&plain.drain.s), fmtStmts(&once.drain.s), fmtRatio(ratio(once.drain.s.stmtsPerOp(), plain.drain.s.stmtsPerOp())))
		lOps, lP50 := versus(&once.loop, &plain.loop)
		t.add(fmt.Sprintf("%d callers: jobs/s", set.callers), fmtRate(plain.loop.s.opsPerSec()), fmtRate(once.loop.s.opsPerSec()), fmtRatio(lOps))
		t.add(fmt.Sprintf("%d callers: insert → completion p50", set.callers), fmtDur(plain.loop.s.pct(50)), fmtDur(once.loop.s.pct(50)), fmtRatio(lP50))
		t.add(fmt.Sprintf("%d callers: insert → completion p99", set.callers), fmtDur(plain.loop.s.pct(99)), fmtDur(once.loop.s.pct(99)),
			fmtRatio(ratio(float64(once.loop.s.pct(99)), float64(plain.loop.s.pct(99)))))
		pair := func(label string, a, b *sample) {
			t.add(label, fmtDur(a.pct(50)), fmtDur(b.pct(50)), fmtRatio(ratio(float64(b.pct(50)), float64(a.pct(50)))))
		}
		pair("of which River's queue wait p50 (inserted → fetched; `JobStatistics`)", &plain.wait, &once.wait)
		pair("of which River's run p50 (the worker, as River times it)", &plain.run, &once.run)
		pair("of which River's completion p50 (recording it)", &plain.done, &once.done)
		for i, phase := range []string{"backlog", fmt.Sprintf("%d callers", set.callers)} {
			a, b := &plain.work[i], &once.work[i]
			t.add(fmt.Sprintf("the worker's own time for the charge, %s jobs: p50 / p99", phase),
				fmtDur(a.pct(50))+" / "+fmtDur(a.pct(99)), fmtDur(b.pct(50))+" / "+fmtDur(b.pct(99)), "")
		}
		p("%s\n", t)
		p("%s\n\n", s.costVerdict())
	}
	if c := s.crash; c != nil && len(c.cells) > 0 {
		p("### Redelivery after a crash\n\n")
		p("Per trial, one job of every mode at each kill point. A River worker process (the bench binary re-executed; River and Sentinel on one pool) is SIGKILLed %q (the provider charged; the worker had not returned) or %q (every worker of its batch returned; a query tracer stops River's next statement, its completion among them, and the parent kills the process). River's JobTimeout and RescueStuckJobsAfter: %s (defaults 1m and 1h); Sentinel's lease TTL: %s. After the rescue horizon a fresh worker process, River's leader, starts: its rescuer makes the jobs retryable (River's default retry policy), its scheduler makes them available, and it works them (attempt 2). The provider is a table on the same server: %q charges every request, %q once per reference. %s per mode and kill point.\n\n",
			killInFlight, killAfterReturn, c.rescue, c.ttl, providerPlain, providerIdempotent, plural(c.cells[0].trials, "trial"))
		t := newTable("mode", "provider", "kill", ">trials", ">charged twice", ">left for an operator", ">completed", ">other", ">redelivered", ">provider requests", ">outcome p50", ">max")
		for _, cl := range c.cells {
			t.add(cl.mode.name, cl.mode.provider, cl.kill, fmt.Sprint(cl.trials), fmt.Sprint(cl.twice), fmt.Sprint(cl.operator), fmt.Sprint(cl.success),
				fmt.Sprint(len(cl.other)), fmt.Sprint(cl.redelivered), fmt.Sprint(cl.requests), fmtDur(cl.toResult.pct(50)), fmtDur(cl.toResult.pct(100)))
		}
		p("%s\n", t)
		for _, cl := range c.cells {
			if len(cl.other) > 0 {
				p("- %s, %s, other outcomes: %s\n", cl.mode.name, cl.kill, strings.Join(cl.other[:min(3, len(cl.other))], "; "))
			}
		}
		p("\"Left for an operator\": the redelivered job's `Once` returned `ErrUncertain` and the worker cancelled the job (`river.JobCancel`), as examples/river does. \"Outcome\": from the kill to the redelivered job's outcome, the rescue horizon and River's scheduler (every 5 s) included. How each mode charges:\n\n")
		for _, m := range riverCrashModes() {
			p("- %s: %s.\n", m.name, m.how)
		}
		p("\n")
	}
	return b.String()
}

// costVerdict says what the Once adds to the worker and what dominates a
// job's insert-to-completion time.
func (s *riverSection) costVerdict() string {
	if len(s.cost) != 2 {
		return ""
	}
	plain, once := s.cost[0], s.cost[1]
	w0, w1 := &plain.work[1], &once.work[1] // the closed loop's
	added := w1.pct(50) - w0.pct(50)
	e2e := once.loop.s.pct(50)
	if e2e <= 0 || w1.ops == 0 {
		return "Not measured."
	}
	dom := "River's queue wait (its fetch cooldown of 100ms and polling)"
	if w, r, d := once.wait.pct(50), once.run.pct(50), once.done.pct(50); r >= w && r >= d {
		dom = "the worker's run"
	} else if d >= w && d >= r {
		dom = "River's completion (its batch completer records completions every 250ms unless 100 are waiting)"
	}
	return fmt.Sprintf("With %d callers, `Once` adds %s to the worker's charge at p50 (%s with it, %s without), %.1f%% of a job's insert-to-completion p50 with it (%s); what dominates that time is %s.",
		s.set.callers, fmtDur(added), fmtDur(w1.pct(50)), fmtDur(w0.pct(50)), 100*float64(added)/float64(e2e), fmtDur(e2e), dom)
}
