package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// CPU accounting of a measurement, when the server runs on this machine:
// the bench process's CPU (getrusage), the server's (its postmaster and
// every process the postmaster started, from /proc), and the machine's
// idle time (/proc/stat). With them the many-callers section says what a
// ratio target would need of the machine: the operations per second both
// would reach if the CPUs were fully used (issue #27: at 64 callers the
// machine idles while Sentinel runs, and the CPU per operation bounds the
// ratio a target can ask); the handover section gives CPU per handover
// (issue #30: 8 pairs are CPU-bound).

// userHZ is Linux's clock tick for /proc's CPU times (USER_HZ: 100 on
// every architecture Go supports on Linux).
const userHZ = 100

// cpuMeter reads CPU times; nil when the server's processes are not
// visible here (a server elsewhere, or no /proc).
type cpuMeter struct {
	postmaster int
}

// cpuReading is one reading of the meter.
type cpuReading struct {
	client      time.Duration             // CPU this process used so far
	server      map[procKey]time.Duration // CPU each server process used so far
	busy, total time.Duration             // the machine's CPU time not idle, and all of it, over every CPU
}

// procKey names a process across readings: its pid and start time, so that
// a pid reused by a new process is a new process.
type procKey struct {
	pid   int
	start int64
}

// newCPUMeter finds the server's postmaster from a backend of admin's: the
// backend's process must be a postgres process on this machine, and its
// parent the postmaster. It returns nil otherwise.
func newCPUMeter(ctx context.Context, admin *pgxpool.Pool) *cpuMeter {
	if runtime.GOOS != "linux" {
		return nil
	}
	var backend int
	if err := admin.QueryRow(ctx, "SELECT pg_catalog.pg_backend_pid()").Scan(&backend); err != nil {
		return nil
	}
	st, ok := readProcStat(backend)
	if !ok || st.comm != "postgres" {
		return nil
	}
	pm, ok := readProcStat(st.ppid)
	if !ok || pm.comm != "postgres" {
		return nil
	}
	return &cpuMeter{postmaster: st.ppid}
}

// read takes a reading.
func (m *cpuMeter) read() cpuReading {
	var r cpuReading
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		r.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	r.server = map[procKey]time.Duration{}
	if pm, ok := readProcStat(m.postmaster); ok {
		r.server[procKey{m.postmaster, pm.start}] = pm.cpu
	}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.ppid == m.postmaster {
			r.server[procKey{pid, st.start}] = st.cpu
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		r.busy, r.total = parseCPULine(string(b))
	}
	return r
}

// procStat is what the bench needs of /proc/PID/stat.
type procStat struct {
	comm  string
	ppid  int
	cpu   time.Duration // utime + stime
	start int64         // starttime, in ticks since boot
}

func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(string(b))
}

// parseProcStat parses a /proc/PID/stat line: "pid (comm) state ppid ...",
// utime, stime and starttime being fields 14, 15 and 22 (comm may hold
// spaces and parentheses: it ends at the last ')').
func parseProcStat(s string) (procStat, bool) {
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, false
	}
	f := strings.Fields(s[closing+1:]) // f[0] is field 3 (state)
	if len(f) < 20 {
		return procStat{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	start, err4 := strconv.ParseInt(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return procStat{}, false
	}
	return procStat{comm: s[open+1 : closing], ppid: ppid, cpu: time.Duration(ut+st) * time.Second / userHZ, start: start}, true
}

// parseCPULine reads /proc/stat's first line ("cpu user nice system idle
// iowait irq softirq steal ..."): busy is all but idle and iowait.
func parseCPULine(s string) (busy, total time.Duration) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var idle, all int64
	for i, x := range f[1:] {
		if i >= 8 { // guest times are counted in user already
			break
		}
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, 0
		}
		all += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	tick := time.Second / userHZ
	return time.Duration(all-idle) * tick, time.Duration(all) * tick
}

// cpuUse is a measurement's CPU, the difference of two readings.
type cpuUse struct {
	client, server, busy, total time.Duration
}

// to is the CPU used from reading a to reading b. A server process counts
// what it used between the two (all of it when it started after a); one
// that exited in between is left out (its CPU since a cannot be read), so
// the server's figure is a lower bound when connections close mid-run.
func (a cpuReading) to(b cpuReading) cpuUse {
	u := cpuUse{client: b.client - a.client, busy: b.busy - a.busy, total: b.total - a.total}
	for k, cpu := range b.server {
		u.server += cpu - a.server[k]
	}
	return u
}

func (u *cpuUse) add(o cpuUse) {
	u.client += o.client
	u.server += o.server
	u.busy += o.busy
	u.total += o.total
}

// cpuCeiling describes a cell's CPU per operation and what it would reach
// with every CPU busy, in ops/s: cpus / (client + server per op).
func cpuCeiling(s *sample, cpus int) (perOpClient, perOpServer time.Duration, idle, ceiling float64, ok bool) {
	if s.cpu == nil || s.ops == 0 || s.cpu.total <= 0 || s.cpu.client+s.cpu.server <= 0 {
		return 0, 0, 0, 0, false
	}
	perOpClient = s.cpu.client / time.Duration(s.ops)
	perOpServer = s.cpu.server / time.Duration(s.ops)
	idle = 1 - float64(s.cpu.busy)/float64(s.cpu.total)
	ceiling = float64(cpus) / (s.cpu.client + s.cpu.server).Seconds() * float64(s.ops)
	return perOpClient, perOpServer, idle, ceiling, true
}

// cpuLine renders a cell's CPU figures for the report.
func cpuLine(name string, s *sample, cpus int) string {
	c, sv, idle, ceil, ok := cpuCeiling(s, cpus)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s: %s ops/s; CPU per operation: this process %s, the server %s; the machine %.0f %% idle; every CPU busy: ~%s ops/s",
		name, fmtRate(s.opsPerSec()), fmtDur(c), fmtDur(sv), idle*100, fmtRate(ceil))
}

// cpuPerHandover renders a handover sample's CPU per handover and the
// machine's idle time (no ceiling: the handover targets are latencies).
func cpuPerHandover(s *sample) string {
	c, sv, idle, _, ok := cpuCeiling(s, 1)
	if !ok {
		return ""
	}
	return fmt.Sprintf("this process %s, the server %s per handover; the machine %.0f %% idle", fmtDur(c), fmtDur(sv), idle*100)
}
