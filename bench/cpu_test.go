package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// comm with a space and a parenthesis; utime 250, stime 50 ticks.
	line := "4242 (postgres: a) b) S 2262 4242 4242 0 -1 4194624 1419 0 0 0 250 50 0 0 20 0 1 0 12345 229584896 3196 18446744073709551615\n"
	st, ok := parseProcStat(line)
	if !ok || st.comm != "postgres: a) b" || st.ppid != 2262 || st.cpu != 3*time.Second || st.start != 12345 {
		t.Fatalf("parseProcStat = %+v, %v", st, ok)
	}
	if _, ok := parseProcStat("4242 (short) S 1"); ok {
		t.Fatal("a truncated line parsed")
	}
	if _, ok := parseProcStat("no parentheses"); ok {
		t.Fatal("a line without comm parsed")
	}
}

func TestParseCPULine(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	busy, total := parseCPULine("cpu  100 0 50 800 50 0 0 0 30 0\ncpu0 1 2 3 4 5\n")
	if busy != 1500*time.Millisecond || total != 10*time.Second {
		t.Fatalf("busy %v total %v, want 1.5s of 10s (guest time is in user already)", busy, total)
	}
	if b, tot := parseCPULine("intr 1 2 3"); b != 0 || tot != 0 {
		t.Fatal("a line that is not the cpu line parsed")
	}
}

func TestCPUCeiling(t *testing.T) {
	s := &sample{ops: 1000, elapsed: time.Second}
	if _, _, _, _, ok := cpuCeiling(s, 2); ok {
		t.Fatal("a sample without CPU figures has a ceiling")
	}
	// 1000 ops using 40 ms of client and 60 ms of server CPU: 100 µs per
	// op; 2 CPUs fully busy: 20,000 ops/s. The machine was 75 % busy.
	s.cpu = &cpuUse{client: 40 * time.Millisecond, server: 60 * time.Millisecond, busy: 1500 * time.Millisecond, total: 2 * time.Second}
	c, sv, idle, ceil, ok := cpuCeiling(s, 2)
	if !ok || c != 40*time.Microsecond || sv != 60*time.Microsecond || idle < 0.249 || idle > 0.251 || ceil < 19999 || ceil > 20001 {
		t.Fatalf("cpuCeiling = %v %v %v %v %v", c, sv, idle, ceil, ok)
	}
	line := cpuLine("sentinel.Once", s, 2)
	for _, want := range []string{"sentinel.Once: 1000 ops/s", "this process 40 µs", "the server 60 µs", "25 % idle", "~20000 ops/s"} {
		if !strings.Contains(line, want) {
			t.Errorf("cpuLine = %q, lacks %q", line, want)
		}
	}
	if got := cpuPerHandover(s); got != "this process 40 µs, the server 60 µs per handover; the machine 25 % idle" {
		t.Errorf("cpuPerHandover = %q", got)
	}
	if got := cpuPerHandover(&sample{ops: 5}); got != "" {
		t.Errorf("cpuPerHandover without CPU figures = %q", got)
	}
	// Server processes between two readings: one kept (counts its
	// difference), one started (counts all), one exited (left out, not
	// subtracted), one pid reused by a new process (counts all of the new).
	a := cpuReading{server: map[procKey]time.Duration{{1, 10}: 5 * time.Second, {2, 10}: 9 * time.Second, {3, 10}: 7 * time.Second}}
	b := cpuReading{server: map[procKey]time.Duration{{1, 10}: 6 * time.Second, {4, 20}: 2 * time.Second, {3, 30}: time.Second}}
	if u := a.to(b); u.server != 4*time.Second {
		t.Errorf("server CPU between readings = %v, want 4s (1s kept + 2s started + 1s reused pid)", u.server)
	}
	// Pooled rounds add up.
	var pooled sample
	pooled.add(*s)
	pooled.add(*s)
	if pooled.cpu == nil || pooled.cpu.client != 80*time.Millisecond || pooled.cpu == s.cpu {
		t.Fatalf("pooled CPU %+v (must be its own copy)", pooled.cpu)
	}
}
