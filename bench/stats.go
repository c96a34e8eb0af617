package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// sample is what one measured cell (an implementation of an operation at
// one worker count) collected, possibly over several interleaved rounds.
type sample struct {
	ops     int             // completed operations
	elapsed time.Duration   // wall time spent measuring, summed over rounds
	lat     []time.Duration // one latency per operation
	stmts   int64           // statements sent, when counted (-1: not counted)
	cpu     *cpuUse         // CPU used while measuring (nil: not measured, see cpu.go)
	sorted  bool
}

func (s *sample) add(o sample) {
	s.ops += o.ops
	s.elapsed += o.elapsed
	s.lat = append(s.lat, o.lat...)
	s.sorted = false
	if o.stmts < 0 || s.stmts < 0 {
		s.stmts = -1
	} else {
		s.stmts += o.stmts
	}
	if o.cpu != nil {
		if s.cpu == nil {
			s.cpu = &cpuUse{}
		}
		s.cpu.add(*o.cpu)
	}
}

// opsPerSec is completed operations per second of wall time.
func (s *sample) opsPerSec() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return float64(s.ops) / s.elapsed.Seconds()
}

// pct returns the p-th percentile (0 < p <= 100) of the latencies, by the
// nearest-rank method; 0 when there are none.
func (s *sample) pct(p float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	if !s.sorted {
		slices.Sort(s.lat)
		s.sorted = true
	}
	rank := int(math.Ceil(p / 100 * float64(len(s.lat))))
	rank = min(max(rank, 1), len(s.lat))
	return s.lat[rank-1]
}

func (s *sample) mean() time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range s.lat {
		sum += d
	}
	return sum / time.Duration(len(s.lat))
}

// stmtsPerOp is the mean number of statements per operation, NaN when the
// statements were not counted.
func (s *sample) stmtsPerOp() float64 {
	if s.stmts < 0 || s.ops == 0 {
		return math.NaN()
	}
	return float64(s.stmts) / float64(s.ops)
}

// fmtDur prints a latency with three significant digits in a unit that
// suits it.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < 999500*time.Nanosecond: // below, three digits of µs; at it, "1 ms" rather than "1e+03 µs"
		return fmt.Sprintf("%.3g µs", float64(d)/float64(time.Microsecond))
	case d < 999500*time.Microsecond:
		return fmt.Sprintf("%.3g ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3g s", d.Seconds())
	}
}

// fmtRate prints an ops/s figure.
func fmtRate(r float64) string {
	switch {
	case r <= 0 || math.IsNaN(r):
		return "–"
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	default:
		return fmt.Sprintf("%.3g", r)
	}
}

// fmtRatio prints a ratio like "1.07x".
func fmtRatio(r float64) string {
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		return "–"
	}
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0fx", r)
	case r < 0.01:
		return fmt.Sprintf("%.2gx", r)
	default:
		return fmt.Sprintf("%.2fx", r)
	}
}

func fmtBytes(b float64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.2f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// ratio divides, returning NaN when either side is missing.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// table is a markdown table.
type table struct {
	header []string
	align  []byte // 'l' or 'r' per column
	rows   [][]string
}

func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		a := byte('l')
		if strings.HasPrefix(c, ">") {
			a, c = 'r', c[1:]
		}
		t.header = append(t.header, c)
		t.align = append(t.align, a)
	}
	return t
}

func (t *table) add(cells ...string) {
	row := make([]string, len(t.header))
	copy(row, cells)
	t.rows = append(t.rows, row)
}

// String renders the table in GitHub markdown, padded for reading as text.
func (t *table) String() string {
	width := make([]int, len(t.header))
	for i, h := range t.header {
		width[i] = max(3, len([]rune(h)))
	}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if t.align[i] == 'r' {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(t.header)
	b.WriteString("|")
	for i := range t.header {
		if t.align[i] == 'r' {
			b.WriteString(" " + strings.Repeat("-", width[i]-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", width[i]) + " |")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}

// target is one goal from issue #4 with its measured value.
type target struct {
	name     string
	measured string
	limit    string
	ok       bool
	missing  bool   // the figure could not be measured
	unjudged string // why the figure is not judged against the limit ("": it is)
}

func (t target) result() string {
	switch {
	case t.missing:
		return "not measured"
	case t.unjudged != "":
		return "not judged: " + t.unjudged
	case t.ok:
		return "pass"
	default:
		return "**miss**"
	}
}

// ratioTarget builds a target for a ratio that must stay at or below (le)
// or at or above (!le) limit.
func ratioTarget(name string, r, limit float64, le bool) target {
	t := target{name: name, measured: fmtRatio(r)}
	if le {
		t.limit = "≤ " + fmtRatio(limit)
		t.ok = r <= limit
	} else {
		t.limit = "≥ " + fmtRatio(limit)
		t.ok = r >= limit
	}
	t.missing = math.IsNaN(r)
	return t
}
