// Command bench measures Sentinel against the floor (the library's own
// statements issued by hand with pgx) and against its peers (DBOS Transact
// Go, cirello.io/pglock, pg_advisory_lock, etcd), all against the same
// PostgreSQL in one run, and prints a markdown report with absolute
// figures, ratios and the targets of issues #4 and #20. It leads with
// Sentinel beside DBOS for "run this payment exactly once": latency,
// callers on equal pools, and a crash table (SIGKILL of a worker process
// in flight and after fn returned, with a plain and an idempotent provider).
// A section puts Once inside River (github.com/riverqueue/river) workers:
// what it costs a River job, and what it changes when River redelivers a
// job after its worker process was killed (river.go).
//
//	cd bench && go run . [-duration 5s] [-workers 1,8]
//
// It uses $DATABASE_URL when set, else a throwaway cluster started from the
// local PostgreSQL binaries (internal/pgtemp). Progress goes to stderr, the
// report to stdout. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// pglockVersion is the version pinned in go.mod.
const pglockVersion = "v1.16.1"

// Operations measured for throughput and latency.
const (
	opOnceFresh  = "Once, fresh key"
	opOnceReplay = "Once, replay"
	opLease      = "lease acquire + release"
)

type options struct {
	cpuProfile      string        // a Go CPU profile of the whole run, written here
	duration        time.Duration // measured time per implementation and worker count
	rounds          int           // interleaved rounds the duration is split into
	warmup          time.Duration // unrecorded warm-up per implementation and worker count
	workers         []int
	leases          int           // leases held by one client
	leaseTTL        time.Duration // their TTL (renewed every TTL/3)
	rows            int           // completed executions for the large-table comparison
	handoverMin     int           // minimum handovers per pair
	pglockLease     time.Duration
	pglockHeartbeat time.Duration
	only            []string // sections to run; empty: all
	manyCallers     []int    // the many-callers section: concurrent callers on one client
	manyPool        int      // its pool size, for every implementation
	coInFlight      int      // Config.CoalesceInFlight of the measured clients (0: the default)

	electionTTL       time.Duration // leader election: the TTL of every implementation
	electionTrials    int           // failovers (leader process killed) per implementation
	electionHandovers int           // resign handovers per implementation
	electionWindow    time.Duration // window for the statements-per-second figures

	peerCallers []int         // Sentinel vs DBOS: concurrent callers on a pool of -many-pool (the lone caller always runs)
	crashTrials int           // crash table: trials per library, kill point and provider
	crashTTL    time.Duration // crash table: Sentinel's lease TTL (how long a dead executor holds the key)

	riverJobs    int           // River: backlog jobs per mode, over all rounds
	riverWorkers int           // River: MaxWorkers of the measured queues
	riverCallers int           // River: closed-loop callers
	riverTrials  int           // River: crash trials per mode and kill point
	riverRescue  time.Duration // River: JobTimeout and RescueStuckJobsAfter in the crash trials
}

// Sections of a run, for -only.
var sections = []string{"peers", "crash", "river", "throughput", "handover", "leases", "rows", "election", "queue", "many"}

func (o options) want(section string) bool {
	return len(o.only) == 0 || slices.Contains(o.only, section)
}

func parseFlags(args []string, errOut io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per implementation and worker count (split over -rounds)")
	fs.IntVar(&o.rounds, "rounds", 5, "interleaved rounds per measurement (implementations alternate between rounds)")
	fs.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "unrecorded warm-up per implementation and worker count")
	workers := fs.String("workers", "1,8", "comma-separated worker counts (the first is the sequential case, the largest the parallel one)")
	fs.IntVar(&o.leases, "leases", 10_000, "leases held by one client for the heartbeat/memory figures")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 3*time.Second, "TTL of the held leases (Sentinel's default; renewed every TTL/3)")
	fs.IntVar(&o.rows, "rows", 1_000_000, "completed executions bulk-inserted for the large-table comparison")
	fs.IntVar(&o.handoverMin, "handover-min", 5, "minimum recorded handovers per pair")
	fs.DurationVar(&o.pglockLease, "pglock-lease", 3*time.Second, "pglock lease duration (its waiters poll once per lease)")
	fs.DurationVar(&o.pglockHeartbeat, "pglock-heartbeat", time.Second, "pglock heartbeat frequency")
	fs.DurationVar(&o.electionTTL, "election-ttl", 2*time.Second, "leader election: TTL of every implementation (whole seconds: etcd's session TTL)")
	fs.IntVar(&o.electionTrials, "election-trials", 10, "leader election: failovers (leader process killed) per implementation")
	fs.IntVar(&o.electionHandovers, "election-handovers", 60, "leader election: resign handovers per implementation, after 10 unrecorded ones (half each way)")
	fs.DurationVar(&o.electionWindow, "election-window", 6*time.Second, "leader election: window of the statements-per-second figures")
	manyCallers := fs.String("many-callers", "1,64", "many-callers section: comma-separated counts of concurrent callers on one client")
	fs.IntVar(&o.manyPool, "many-pool", 8, "many-callers section: pool size of every implementation")
	fs.IntVar(&o.coInFlight, "coalesce-in-flight", 0, "Config.CoalesceInFlight of Sentinel's measured clients (0: the library's default; negative: coalescing off)")
	peerCallers := fs.String("peer-callers", "8,64", "Sentinel vs DBOS: comma-separated counts of concurrent callers, each on a pool of -many-pool connections (the lone caller always runs)")
	fs.IntVar(&o.crashTrials, "crash-trials", 40, "crash table: trials per library, kill point and provider")
	fs.DurationVar(&o.crashTTL, "crash-ttl", time.Second, "crash table: Sentinel's lease TTL (a killed executor holds the key this long)")
	fs.IntVar(&o.riverJobs, "river-jobs", 2000, "River: backlog jobs per mode (River alone, River + Once), split over -rounds")
	fs.IntVar(&o.riverWorkers, "river-workers", 100, "River: MaxWorkers of the measured queue (River's documented example value)")
	fs.IntVar(&o.riverCallers, "river-callers", 8, "River: closed-loop callers, each inserting a job and waiting for its completion")
	fs.IntVar(&o.riverTrials, "river-trials", 10, "River crash table: trials per mode and kill point (one retry process per trial for all)")
	fs.DurationVar(&o.riverRescue, "river-rescue", 2*time.Second, "River crash table: River's JobTimeout and RescueStuckJobsAfter (its defaults: 1m and 1h)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the bench process (every section run) to this file")
	only := fs.String("only", "", "comma-separated sections to run, of "+strings.Join(sections, ", ")+" (default all)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, f := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return o, fmt.Errorf("-workers: %q is not a count in 1..64", f)
		}
		if !slices.Contains(o.workers, n) {
			o.workers = append(o.workers, n)
		}
	}
	for _, f := range strings.Split(*manyCallers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 1024 {
			return o, fmt.Errorf("-many-callers: %q is not a count in 1..1024", f)
		}
		if !slices.Contains(o.manyCallers, n) {
			o.manyCallers = append(o.manyCallers, n)
		}
	}
	for _, f := range strings.Split(*peerCallers, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1024 {
			return o, fmt.Errorf("-peer-callers: %q is not a count in 1..1024", f)
		}
		if !slices.Contains(o.peerCallers, n) {
			o.peerCallers = append(o.peerCallers, n)
		}
	}
	if o.crashTrials < 1 || o.crashTTL < 100*time.Millisecond {
		return o, errors.New("-crash-trials must be at least 1 and -crash-ttl at least 100ms")
	}
	if o.riverJobs < 1 || o.riverWorkers < 1 || o.riverCallers < 1 || o.riverTrials < 1 || o.riverRescue < 100*time.Millisecond {
		return o, errors.New("-river-jobs, -river-workers, -river-callers and -river-trials must be at least 1 and -river-rescue at least 100ms")
	}
	if o.manyPool < 1 {
		return o, errors.New("-many-pool must be at least 1")
	}
	for _, f := range strings.Split(*only, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(sections, f) {
			return o, fmt.Errorf("-only: unknown section %q (want %s)", f, strings.Join(sections, ", "))
		}
		o.only = append(o.only, f)
	}
	switch {
	case o.duration <= 0 || o.warmup < 0:
		return o, errors.New("-duration must be positive and -warmup not negative")
	case o.rounds < 1:
		return o, errors.New("-rounds must be at least 1")
	case o.leases < 2 || o.rows < 0 || o.handoverMin < 1 || o.leaseTTL < 30*time.Millisecond:
		return o, errors.New("-leases must be at least 2, -rows not negative, -handover-min at least 1, -lease-ttl at least 30ms")
	case o.electionTTL < time.Second || o.electionTTL%time.Second != 0 || o.electionTrials < 1 || o.electionHandovers < 1 || o.electionWindow <= 0:
		return o, errors.New("-election-ttl must be whole seconds (etcd's session TTL), -election-trials and -election-handovers at least 1, -election-window positive")
	case o.pglockHeartbeat <= 0 || o.pglockLease < 2*o.pglockHeartbeat:
		return o, errors.New("-pglock-lease must be at least twice -pglock-heartbeat (pglock's own rule)")
	}
	return o, nil
}

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if opts.cpuProfile != "" {
		f, err := os.Create(opts.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, opts, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		stop()
		os.Exit(1)
	}
}

// bench is one run.
type bench struct {
	opts         options
	url          string
	schema       string // Sentinel's tables for the main measurements
	extraSchemas []string
	extraDBs     []string // databases the run created (DBOS's system database), dropped at the end
	admin        *pgxpool.Pool
	maxConns     int // per pool
	logw         io.Writer
	start        time.Time
	cpu          *cpuMeter // nil unless the server runs on this machine (cpu.go)
}

func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.logw, "[%6.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, opts options, out, logw io.Writer) error {
	b := &bench{opts: opts, logw: logw, start: time.Now(), maxConns: slices.Max(opts.workers) + 2}
	url, source, cleanup, err := database(ctx, b.progress)
	if err != nil {
		return err
	}
	defer cleanup()
	b.url = url
	if b.admin, err = newPool(ctx, url, 4, nil); err != nil {
		return err
	}
	defer b.admin.Close()
	b.schema = "sentinel_bench_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, s := range append([]string{b.schema}, b.extraSchemas...) {
			if _, err := b.admin.Exec(dctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
				b.progress("dropping schema %s: %v", s, err)
			}
		}
		for _, d := range b.extraDBs {
			if _, err := b.admin.Exec(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d}.Sanitize()+" WITH (FORCE)"); err != nil {
				b.progress("dropping database %s: %v", d, err)
			}
		}
	}()
	c, err := sentinel.New(b.admin, &sentinel.Config{Schema: b.schema})
	if err != nil {
		return err
	}
	err = c.Migrate(ctx)
	c.Close()
	if err != nil {
		return err
	}
	r := &report{opts: opts}
	if r.env, err = collectEnv(ctx, b.admin, source); err != nil {
		return err
	}
	b.progress("PostgreSQL: %s; schema %s", r.env.server, b.schema)
	if b.cpu = newCPUMeter(ctx, b.admin); b.cpu != nil {
		b.progress("the server runs on this machine (postmaster %d): the many-callers and handover sections report CPU per operation", b.cpu.postmaster)
	}

	if opts.want("peers") {
		if r.peers, err = b.peersBench(ctx); err != nil {
			return fmt.Errorf("peers (Sentinel vs DBOS): %w", err)
		}
	}
	if opts.want("crash") {
		if r.crash, err = b.crashBench(ctx); err != nil {
			return fmt.Errorf("crash table: %w", err)
		}
	}
	if opts.want("river") {
		if r.river, err = b.riverBench(ctx); err != nil {
			return fmt.Errorf("river: %w", err)
		}
	}

	for _, w := range opts.workers {
		if !opts.want("throughput") {
			break
		}
		for _, op := range []string{opOnceFresh, opOnceReplay, opLease} {
			setups := []setupFunc{b.setupFloor, b.setupSentinel}
			if op == opLease {
				setups = append(setups, b.setupPglock, b.setupAdvisory)
			}
			if op == opOnceReplay {
				setups = append(setups, b.setupSentinelReplayCold)
			}
			g, err := b.runGroup(ctx, op, w, setups)
			if err != nil {
				return err
			}
			r.groups = append(r.groups, g)
		}
	}
	for _, w := range opts.workers {
		if !opts.want("handover") {
			break
		}
		mks := []func(context.Context) (*handoverImpl, error){b.sentinelHandover, b.advisoryHandover, b.pglockHandover}
		if w == slices.Max(opts.workers) {
			mks = append(mks, b.sentinelCrowdHandover, b.sentinelIdleCrowdHandover(time.Second), b.sentinelIdleCrowdHandover(-1))
		}
		for _, mk := range mks {
			h, err := mk(ctx)
			if err != nil {
				return err
			}
			b.progress("handover, %d pair(s): %s", w, h.name)
			res, err := b.runHandover(ctx, h, w, opts.duration, opts.handoverMin)
			h.close()
			if err != nil {
				return err
			}
			r.handovers = append(r.handovers, res)
		}
	}
	if opts.want("leases") {
		if r.scale, err = b.heldLeases(ctx); err != nil {
			return fmt.Errorf("held leases: %w", err)
		}
	}
	if opts.want("queue") {
		if r.queue, err = b.queueBench(ctx); err != nil {
			return fmt.Errorf("queue: %w", err)
		}
	}
	if opts.want("rows") {
		if r.million, err = b.millionRows(ctx); err != nil {
			return fmt.Errorf("large table: %w", err)
		}
	}
	if opts.want("election") {
		if r.election, err = b.electionBench(ctx); err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
	}
	// Last: it leaves the largest tables behind (about 10^5 lease rows), and
	// the held-leases section after it saw its renewals of 5,000 rows time
	// out (2026-11-24, two full runs; alone after it, it passed).
	if opts.want("many") {
		if r.many, err = b.manyCallers(ctx); err != nil {
			return fmt.Errorf("many callers: %w", err)
		}
	}
	b.progress("done in %s", time.Since(b.start).Round(time.Second))
	r.total = time.Since(b.start)
	_, err = io.WriteString(out, r.String())
	return err
}
