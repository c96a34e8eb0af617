package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

func TestParseRiverResult(t *testing.T) {
	for line, want := range map[string]riverResult{
		"result pay-1 2 ok":                              {payment: "pay-1", attempt: 2, outcome: "ok"},
		"result pay-1 2 uncertain":                       {payment: "pay-1", attempt: 2, outcome: "uncertain"},
		"result pay-1 3 error sentinel: in flight, held": {payment: "pay-1", attempt: 3, outcome: "error sentinel: in flight, held"},
	} {
		if got, ok := parseRiverResult(line); !ok || got != want {
			t.Errorf("parseRiverResult(%q) = %+v, %v; want %+v", line, got, ok, want)
		}
	}
	for _, bad := range []string{"", "charged pay-1", "result pay-1 x ok", "result pay-1 2", "result  2 ok", "returned"} {
		if got, ok := parseRiverResult(bad); ok {
			t.Errorf("parseRiverResult(%q) = %+v, accepted", bad, got)
		}
	}
}

func TestRiverCrashCellRecord(t *testing.T) {
	var c riverCrashCell
	c.record(riverResult{payment: "a", attempt: 2, outcome: "ok"}, 2, 2, 4*time.Second)         // charged twice
	c.record(riverResult{payment: "b", attempt: 2, outcome: "uncertain"}, 1, 1, 5*time.Second)  // for an operator
	c.record(riverResult{payment: "c", attempt: 1, outcome: "error boom"}, 1, 3, 6*time.Second) // not redelivered
	if c.trials != 3 || c.twice != 1 || c.operator != 1 || c.success != 1 || c.redelivered != 2 || c.requests != 6 ||
		len(c.other) != 1 || c.other[0] != "error boom" || c.toResult.pct(50) != 5*time.Second || c.toResult.pct(100) != 6*time.Second {
		t.Errorf("%+v", c)
	}
}

// testRiverSection is a section as a run would leave it, with made-up
// figures.
func testRiverSection() *riverSection {
	set := options{}.riverSettings()
	s := &riverSection{set: set, round: time.Second}
	mk := func(name string, once bool, opsPerSec int, e2e, work time.Duration) *riverCost {
		c := &riverCost{name: name, once: once, jobs: 500, charges: 500}
		c.drain.name, c.loop.name = name, name
		for range 2 {
			d := sample{ops: opsPerSec, elapsed: time.Second, lat: []time.Duration{time.Second}, stmts: int64(opsPerSec / 10)}
			c.drain.s.add(d)
			c.drain.rounds = append(c.drain.rounds, d)
			l := sample{ops: 25, elapsed: time.Second, lat: []time.Duration{e2e, e2e, 3 * e2e}, stmts: -1}
			c.loop.s.add(l)
			c.loop.rounds = append(c.loop.rounds, l)
		}
		c.wait.lat = []time.Duration{40 * time.Millisecond}
		c.run.lat = []time.Duration{work}
		c.done.lat = []time.Duration{180 * time.Millisecond}
		c.work[0] = sample{ops: 1, lat: []time.Duration{2 * work}}
		c.work[1] = sample{ops: 1, lat: []time.Duration{work}}
		return c
	}
	s.cost = []*riverCost{mk("River alone", false, 1000, 250*time.Millisecond, 100*time.Nanosecond),
		mk("River + sentinel.Once", true, 800, 252*time.Millisecond, 2*time.Millisecond+100*time.Nanosecond)}
	s.crash = &riverCrash{rescue: 2 * time.Second, ttl: time.Second}
	for _, kill := range []string{killInFlight, killAfterReturn} {
		for _, m := range riverCrashModes() {
			s.crash.cells = append(s.crash.cells, &riverCrashCell{mode: m, kill: kill})
		}
	}
	return s
}

func TestRiverMarkdown(t *testing.T) {
	s := testRiverSection()
	c := s.crash.cell("river", providerPlain, killInFlight)
	if c == nil || s.crash.cell("once", providerIdempotent, killInFlight) != nil {
		t.Fatal("cell lookup")
	}
	c.record(riverResult{payment: "a", attempt: 2, outcome: "ok"}, 2, 2, 4*time.Second)
	s.crash.cell("once", providerPlain, killInFlight).record(riverResult{payment: "b", attempt: 2, outcome: "uncertain"}, 1, 1, 4*time.Second)
	md := s.markdown(options{})
	for _, want := range []string{
		"## Sentinel with River",
		"With 8 callers, `Once` adds 2 ms to the worker's charge at p50 (2 ms with it, 0.1 µs without), 0.8% of a job's insert-to-completion p50 with it (252 ms); what dominates that time is River's completion",
		"SIGKILLed \"in flight\"",
		"- River + Once + WithRerun(3), provider deduplicating by EffectKey: as River + sentinel.Once with WithRerun(3)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	for _, c := range []struct {
		label      string
		labelCells int
		want       string
	}{
		{" | River alone | River + sentinel.Once | ratio", 1, ""}, // the header
		{"backlog of 2000 jobs: jobs/s, from `InsertMany` to the last completion", 1, "1000 | 800 | 0.80x"},
		{"8 callers: insert → completion p50", 1, "250 ms | 252 ms | 1.01x"},
		{"the worker's own time for the charge, 8 callers jobs: p50 / p99", 1, "0.1 µs / 0.1 µs | 2 ms / 2 ms | "},
		{"River alone | plain | in flight", 3, "1 | 1 | 0 | 1"},
		{"River + sentinel.Once | plain | in flight", 3, "1 | 0 | 1 | 0"},
		{"River alone | plain | after return", 3, "0 | 0 | 0 | 0"},
	} {
		if c.want == "" {
			if !strings.Contains(strings.Join(strings.Fields(md), " "), strings.Join(strings.Fields(c.label), " ")) {
				t.Errorf("markdown lacks the header %q", c.label)
			}
			continue
		}
		if got := riverRow(md, c.labelCells, c.label, len(strings.Split(c.want, " | "))); got != c.want {
			t.Errorf("row %q: %q, want %q", c.label, got, c.want)
		}
	}
	if t.Failed() {
		t.Logf("markdown:\n%s", md)
	}
}

func TestRiverFlags(t *testing.T) {
	o, err := parseFlags([]string{"-only", "river", "-river-trials", "3", "-river-rescue", "1s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	set := o.riverSettings()
	if !o.want("river") || o.want("crash") || set.trials != 3 || set.rescue != time.Second || set.jobs != 2000 ||
		set.maxWorkers != 100 || set.callers != 8 || set.pool != 8 || set.ttl != time.Second {
		t.Errorf("%+v", set)
	}
	for _, bad := range [][]string{{"-river-trials", "0"}, {"-river-jobs", "0"}, {"-river-rescue", "10ms"}, {"-river-callers", "0"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// A zero options value (the smoke test's) gets small defaults.
	if z := (options{}).riverSettings(); z.jobs != 200 || z.trials != 1 || z.rescue != 2*time.Second || z.maxWorkers != 100 {
		t.Errorf("defaults: %+v", z)
	}
}

// The section alone, with tiny figures, against a throwaway cluster (or
// $DATABASE_URL): River alone charges twice after either crash; Once never
// does and leaves the charge cut off mid-way for an operator; WithRerun
// with a provider that deduplicates by EffectKey neither charges twice nor
// leaves anything for an operator.
func TestRiverSmoke(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		if _, err := pgtemp.FindBinDir(); err != nil {
			t.Skipf("no database: %v", err)
		}
	}
	opts := options{duration: 400 * time.Millisecond, rounds: 2, warmup: 50 * time.Millisecond, workers: []int{1},
		only: []string{"river"}, riverJobs: 100, riverCallers: 4, riverWorkers: 20}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	if err := run(ctx, opts, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	report := out.String()
	for row, want := range map[string]string{
		"River alone | plain | in flight":                                                              "1 | 1 | 0 | 1 | 0 | 1 | 2",
		"River alone | plain | after return":                                                           "1 | 1 | 0 | 1 | 0 | 1 | 2",
		"River + sentinel.Once | plain | in flight":                                                    "1 | 0 | 1 | 0 | 0 | 1 | 1",
		"River + sentinel.Once | plain | after return":                                                 "1 | 0 | 0 | 1 | 0 | 1 | 1",
		"River alone, provider deduplicating by payment id | idempotent | in flight":                   "1 | 0 | 0 | 1 | 0 | 1 | 2",
		"River + Once + WithRerun(3), provider deduplicating by EffectKey | idempotent | in flight":    "1 | 0 | 0 | 1 | 0 | 1 | 2",
		"River + Once + WithRerun(3), provider deduplicating by EffectKey | idempotent | after return": "1 | 0 | 0 | 1 | 0 | 1 | 1",
	} {
		if got := riverRow(report, 3, row, 7); got != want {
			t.Errorf("crash table, %s: %q, want %q (trials, twice, operator, completed, other, redelivered, requests)", row, got, want)
		}
	}
	if !strings.Contains(report, "`Once` adds") || strings.Contains(report, "Not measured") {
		t.Errorf("no cost verdict")
	}
	if t.Failed() {
		t.Logf("report:\n%s", report)
	}
}

// riverRow finds the table row whose first labelCells cells, trimmed and
// joined by " | ", are label, and returns its next n cells the same way.
func riverRow(report string, labelCells int, label string, n int) string {
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) >= labelCells+n && strings.Join(cells[:labelCells], " | ") == label {
			return strings.Join(cells[labelCells:labelCells+n], " | ")
		}
	}
	return ""
}
