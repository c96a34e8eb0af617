package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

func TestSamplePercentilesAndRates(t *testing.T) {
	var s sample
	for i := 100; i >= 1; i-- { // unsorted on purpose
		s.lat = append(s.lat, time.Duration(i)*time.Millisecond)
	}
	s.ops, s.elapsed = 100, 2*time.Second
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0.1, time.Millisecond}} {
		if got := s.pct(c.p); got != c.want {
			t.Errorf("pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := s.opsPerSec(); got != 50 {
		t.Errorf("opsPerSec = %v, want 50", got)
	}
	if got := s.mean(); got != 50500*time.Microsecond {
		t.Errorf("mean = %v", got)
	}
	if got := s.stmtsPerOp(); got != 0 {
		t.Errorf("stmtsPerOp with zero statements counted = %v, want 0", got)
	}
	s.stmts = -1
	if !math.IsNaN(s.stmtsPerOp()) {
		t.Errorf("uncounted statements must give NaN, got %v", s.stmtsPerOp())
	}

	// add merges rounds; an uncounted round makes the total uncounted.
	a := sample{ops: 2, elapsed: time.Second, lat: []time.Duration{3, 1}, stmts: 6}
	a.add(sample{ops: 1, elapsed: time.Second, lat: []time.Duration{2}, stmts: 3})
	if a.ops != 3 || a.elapsed != 2*time.Second || a.stmts != 9 || a.pct(50) != 2 || a.stmtsPerOp() != 3 {
		t.Errorf("merged sample: %+v", a)
	}
	a.add(sample{stmts: -1})
	if !math.IsNaN(a.stmtsPerOp()) {
		t.Error("an uncounted round must make the statements uncounted")
	}
	var empty sample
	if empty.pct(50) != 0 || empty.opsPerSec() != 0 || empty.mean() != 0 {
		t.Error("an empty sample must report zeros")
	}
}

func TestFormatting(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "–",
		17600 * time.Nanosecond:   "17.6 µs",
		1520 * time.Microsecond:   "1.52 ms",
		1500 * time.Millisecond:   "1.5 s",
		999600 * time.Microsecond: "1 s",
		999700 * time.Nanosecond:  "1 ms",
		999 * time.Microsecond:    "999 µs",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	for r, want := range map[float64]string{1.0749: "1.07x", 0.0016: "0.0016x", 612.7: "613x", math.NaN(): "–", 0: "–"} {
		if got := fmtRatio(r); got != want {
			t.Errorf("fmtRatio(%v) = %q, want %q", r, got, want)
		}
	}
	if got := fmtBytes(821); got != "821 B" {
		t.Errorf("fmtBytes = %q", got)
	}
	if !math.IsNaN(ratio(1, 0)) || ratio(3, 2) != 1.5 {
		t.Error("ratio")
	}
}

func TestTable(t *testing.T) {
	tb := newTable("name", ">n")
	tb.add("µs-wide", "1")
	tb.add("b", "100")
	want := "" +
		"| name    |   n |\n" +
		"| ------- | --: |\n" +
		"| µs-wide |   1 |\n" +
		"| b       | 100 |\n"
	if got := tb.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestTargets(t *testing.T) {
	if tg := ratioTarget("x", 1.10, 1.15, true); !tg.ok || tg.result() != "pass" || tg.limit != "≤ 1.15x" {
		t.Errorf("%+v", tg)
	}
	if tg := ratioTarget("x", 0.80, 0.85, false); tg.ok || tg.result() != "**miss**" {
		t.Errorf("%+v", tg)
	}
	if tg := ratioTarget("x", math.NaN(), 1, true); tg.result() != "not measured" {
		t.Errorf("%+v", tg)
	}
	tg := ratioTarget("x", 0.80, 0.85, false)
	if tg.unjudged = "fsync=off"; tg.result() != "not judged: fsync=off" {
		t.Errorf("%+v", tg)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-duration", "2s", "-workers", "1, 8,8"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.duration != 2*time.Second || len(o.workers) != 2 || o.workers[1] != 8 || o.leases != 10_000 || o.rows != 1_000_000 {
		t.Errorf("%+v", o)
	}
	for _, bad := range [][]string{
		{"-workers", "0"}, {"-workers", "x"}, {"-rounds", "0"}, {"-duration", "0s"},
		{"-pglock-lease", "1s", "-pglock-heartbeat", "1s"}, {"extra"}, {"-election-ttl", "1500ms"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The whole suite, with tiny figures, against a throwaway cluster (or
// $DATABASE_URL): everything runs, every target is measured, and the
// floor's statements are still the library's.
func TestRunSmoke(t *testing.T) {
	if os.Getenv("DATABASE_URL") == "" {
		if _, err := pgtemp.FindBinDir(); err != nil {
			t.Skipf("no database: %v", err)
		}
	}
	opts := options{
		duration: 200 * time.Millisecond, rounds: 2, warmup: 50 * time.Millisecond, workers: []int{1, 2},
		leases: 50, leaseTTL: 300 * time.Millisecond, rows: 2000, handoverMin: 1,
		// pglock bounds each of its statements by its lease: at 100 ms one
		// on a loaded CI machine ran out (context deadline exceeded).
		pglockLease: 500 * time.Millisecond, pglockHeartbeat: 200 * time.Millisecond,
		peerCallers: []int{2}, crashTrials: 1,
		// The bench's default TTL: a first worker whose charge takes
		// longer than its lease (CI's machine under load: one did, at
		// 300 ms) loses the key before fn returns, and its Once says
		// uncertain instead of reaching the statement it is killed at.
		crashTTL: time.Second,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var out, log bytes.Buffer
	if err := run(ctx, opts, &out, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}
	report := out.String()
	for _, want := range []string{"## Throughput and latency", "## Handover", "## 50 leases held by one client",
		"## Fresh Once with 2000 completed executions", "## Targets", "cirello.io/pglock", "pg_advisory_lock",
		"## Leader election", "election handover p50 after Resign", "Floor, same run: one durable single-row `UPDATE`",
		"## Sentinel vs DBOS Transact Go", "fresh payment p50, lone caller", "2 callers, pool 8", "### Crash table",
		"| sentinel Turn, 32 more processes listening |", "## Sentinel with River", "### Redelivery after a crash"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(report, "not measured") {
		t.Errorf("a target was not measured:\n%s", report)
	}
	if strings.Contains(report, "the floor is stale") || strings.Count(report, "identical to the floor's") != 2 ||
		!strings.Contains(report, "Once, replay: the floor is one primary-key SELECT") {
		t.Errorf("the floor's statements differ from the library's: update bench/floor_sql.go\n%s", report)
	}
	// The crash table's outcomes (one trial per cell): Sentinel never
	// charges twice and leaves every crash for an operator; DBOS re-runs
	// the charge step, which a plain provider charges twice.
	for _, want := range []string{
		"| SIGKILL in flight, plain provider         | 0 charged twice, 1 left for an operator, 0 reported success",
		"| SIGKILL after return, idempotent provider | 0 charged twice, 1 left for an operator, 0 reported success",
		"1 charged twice, 0 left for an operator, 1 reported success",
		"0 charged twice, 0 left for an operator, 1 reported success",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// WithRerun, with a provider that deduplicates by EffectKey: the retry
	// runs fn again and succeeds, nobody is asked, nobody charged twice;
	// with a plain provider the re-run charges again (why the option is
	// only for deduplicated effects).
	for row, want := range map[string]string{
		"SIGKILL in flight, idempotent provider":    "0 charged twice, 0 left for an operator, 1 reported success",
		"SIGKILL after return, idempotent provider": "0 charged twice, 0 left for an operator, 1 reported success",
		"SIGKILL in flight, plain provider":         "1 charged twice, 0 left for an operator, 1 reported success",
	} {
		if got := crashCellText(report, row, 2); !strings.HasPrefix(got, want) {
			t.Errorf("crash table, %s, WithRerun: %q, want %q", row, got, want)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", report)
	}
}

// crashCellText is the text of column col (0: the row's label) of the
// side-by-side table's row whose label is label.
func crashCellText(report, label string, col int) string {
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) > col+1 && strings.TrimSpace(cells[1]) == label {
			return strings.TrimSpace(cells[col+1])
		}
	}
	return ""
}
