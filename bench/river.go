package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sentinel-coordination/sentinel"
)

// River (github.com/riverqueue/river), the Go job queue on PostgreSQL,
// delivers each job at least once. The section answers a River user's
// question: what does wrapping the job's charge in sentinel.Once cost, and
// what does it buy? Cost: the same payment jobs worked by River alone and
// by River with the charge inside sentinel.Once, on equal pools, rounds
// interleaved. What it buys: a crash table (river_crash.go) in which a
// River worker process is SIGKILLed in the middle of a charge or after its
// worker returned, and River redelivers the job to a fresh worker process.
// River's tables live in a schema of their own, created, migrated and
// dropped by the run.

// riverVersion is the version pinned in go.mod.
const riverVersion = "v0.51.2"

const nameRiver = "River " + riverVersion

// Queues of the section: one per cost mode, so that the two clients never
// work each other's jobs, and one per kill point of the crash table.
const (
	riverQueuePlain    = "cost_plain"
	riverQueueOnce     = "cost_once"
	riverQueueInFlight = "crash_in_flight"
	riverQueueAfter    = "crash_after_return"
)

// riverPayArgs is the section's job: charge one payment.
type riverPayArgs struct {
	Payment  string `json:"payment"`
	Mode     string `json:"mode,omitempty"`     // crash table: the worker's code path (riverMode.lib)
	Provider string `json:"provider,omitempty"` // crash table: providerPlain or providerIdempotent
}

// Kind is the job's kind in River.
func (riverPayArgs) Kind() string { return "bench_pay" }

// riverSettings are the section's settings, with defaults for a zero value
// (the smoke test builds options by hand).
type riverSettings struct {
	jobs       int           // cost: jobs of the backlog, over all rounds, per mode
	maxWorkers int           // cost: River's MaxWorkers of the queue
	callers    int           // cost: closed-loop callers, each inserting a job and waiting for its completion
	pool       int           // cost: connections of each mode's pool (River and, in the Once mode, Sentinel on it)
	trials     int           // crash table: trials per mode and kill point
	rescue     time.Duration // crash table: River's JobTimeout and RescueStuckJobsAfter
	ttl        time.Duration // crash table: Sentinel's lease TTL
}

func (o options) riverSettings() riverSettings {
	s := riverSettings{jobs: o.riverJobs, maxWorkers: o.riverWorkers, callers: o.riverCallers, pool: o.peerPool(),
		trials: o.riverTrials, rescue: o.riverRescue}
	_, s.ttl = o.crashSettings()
	if s.jobs == 0 {
		s.jobs = 200
	}
	if s.maxWorkers == 0 {
		s.maxWorkers = 100
	}
	if s.callers == 0 {
		s.callers = 8
	}
	if s.trials == 0 {
		s.trials = 1
	}
	if s.rescue == 0 {
		s.rescue = 2 * time.Second
	}
	return s
}

// riverCost is one mode of the cost part over all its rounds.
type riverCost struct {
	name    string
	once    bool
	drain   cellResult // the backlog: ops/s is jobs/s from InsertMany to the last completion
	loop    cellResult // the closed loop: latency from Insert to the completion event
	work    [2]sample  // the worker's own time for the charge (Work's body): backlog jobs, closed-loop jobs
	wait    sample     // River's JobStatistics of the loop's jobs: queue wait,
	run     sample     // run (the worker, as River times it)
	done    sample     // and completion (recording it)
	jobs    int64      // jobs completed, warm-up included
	charges int64      // charges the provider counted: one per job

}

type riverSection struct {
	set   riverSettings
	round time.Duration // closed-loop time per round and mode
	cost  []*riverCost  // River alone, River + Once
	crash *riverCrash
}

// riverSchema creates River's schema for the run and migrates it (dropped
// when the run ends).
func (b *bench) riverSchema(ctx context.Context) (string, error) {
	name := "sentinel_bench_river_" + uuid.NewString()[:8]
	if _, err := b.admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	b.extraSchemas = append(b.extraSchemas, name)
	m, err := rivermigrate.New(riverpgxv5.New(b.admin), &rivermigrate.Config{Schema: name, Logger: dbosLogger(b.logw)})
	if err != nil {
		return "", err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return "", fmt.Errorf("migrating River's schema: %w", err)
	}
	return name, nil
}

// riverBench runs the section: the cost part, then the crash table.
func (b *bench) riverBench(ctx context.Context) (*riverSection, error) {
	set := b.opts.riverSettings()
	schema, err := b.riverSchema(ctx)
	if err != nil {
		return nil, err
	}
	sec := &riverSection{set: set, round: b.opts.duration / time.Duration(b.opts.rounds)}
	if err := b.riverCostBench(ctx, sec, schema); err != nil {
		return nil, err
	}
	if sec.crash, err = b.riverCrashBench(ctx, set, schema); err != nil {
		return nil, fmt.Errorf("crash table: %w", err)
	}
	return sec, nil
}

// riverCostApp is a River client working one cost mode's queue in this
// process, on a pool of its own.
type riverCostApp struct {
	c     *riverCost
	queue string
	pool  *pgxpool.Pool
	tr    *tracer
	rc    *river.Client[pgx.Tx]
	sc    *sentinel.Client // nil: River alone

	mu      sync.Mutex
	waiters map[string]chan *river.Event // by payment, until its completion event
	phase   atomic.Int32                 // where Work's times go: phaseWarm, phaseDrain or phaseLoop
	work    [3][]time.Duration           // by phase
	charges atomic.Int64                 // charges the provider counted
	jobs    atomic.Int64                 // jobs seen completed
	unsub   func()
	quit    chan struct{}
}

// Phases of the cost part.
const (
	phaseWarm  = 0
	phaseDrain = 1
	phaseLoop  = 2
)

type riverCostWorker struct {
	river.WorkerDefaults[riverPayArgs]
	app *riverCostApp
}

// Work charges the payment, inside sentinel.Once keyed by it in the Once
// mode, and records the time the charge took.
func (w *riverCostWorker) Work(ctx context.Context, job *river.Job[riverPayArgs]) error {
	a := w.app
	t0 := time.Now()
	var err error
	if a.sc == nil {
		_, err = a.charge(ctx)
	} else {
		_, err = sentinel.Once(ctx, a.sc, "pay/"+job.Args.Payment, a.charge)
	}
	d := time.Since(t0)
	ph := a.phase.Load()
	a.mu.Lock()
	a.work[ph] = append(a.work[ph], d)
	a.mu.Unlock()
	return err
}

// charge is the provider of the cost part, the same as the DBOS
// comparison's: in process, counted.
func (a *riverCostApp) charge(ctx context.Context) (receipt, error) {
	a.charges.Add(1)
	return charge(ctx)
}

// riverConfig is River's configuration in the section: its defaults
// (FetchCooldown 100ms, FetchPollInterval 1s, the default retry policy)
// but the schema, logger and queues.
func riverConfig(schema string, logger *slog.Logger, workers *river.Workers, queues map[string]river.QueueConfig) *river.Config {
	return &river.Config{Schema: schema, Logger: logger, Queues: queues, Workers: workers}
}

func (b *bench) newRiverCostApp(ctx context.Context, c *riverCost, schema, queue string, set riverSettings) (*riverCostApp, error) {
	a := &riverCostApp{c: c, queue: queue, tr: &tracer{}, waiters: map[string]chan *river.Event{}, quit: make(chan struct{})}
	var err error
	if a.pool, err = newPool(ctx, b.url, set.pool, a.tr); err != nil {
		return nil, err
	}
	if c.once {
		// The same pool as River's: a River user hands Sentinel the pool
		// River has.
		if a.sc, err = sentinel.New(a.pool, &sentinel.Config{Schema: b.schema}); err != nil {
			a.pool.Close()
			return nil, err
		}
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverCostWorker{app: a})
	cfg := riverConfig(schema, dbosLogger(b.logw), workers, map[string]river.QueueConfig{queue: {MaxWorkers: set.maxWorkers}})
	// Neither client of the cost part is River's leader, so neither runs
	// River's maintenance services beside its work.
	cfg.LeaderElectionDisabled = true
	if a.rc, err = river.NewClient(riverpgxv5.New(a.pool), cfg); err != nil {
		a.close()
		return nil, err
	}
	events, unsub := a.rc.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: set.jobs + 10*set.callers + 1000})
	a.unsub = unsub
	go a.dispatch(events)
	if err := a.rc.Start(ctx); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// dispatch hands each completion event to the caller waiting for its
// payment.
func (a *riverCostApp) dispatch(events <-chan *river.Event) {
	for {
		select {
		case <-a.quit:
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			var args riverPayArgs
			if err := json.Unmarshal(ev.Job.EncodedArgs, &args); err != nil {
				continue
			}
			a.mu.Lock()
			ch := a.waiters[args.Payment]
			delete(a.waiters, args.Payment)
			a.mu.Unlock()
			if ch != nil {
				ch <- ev
			}
		}
	}
}

// expect registers a waiter for payment's completion event.
func (a *riverCostApp) expect(payment string) chan *river.Event {
	ch := make(chan *river.Event, 1)
	a.mu.Lock()
	a.waiters[payment] = ch
	a.mu.Unlock()
	return ch
}

func (a *riverCostApp) close() {
	if a.rc != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = a.rc.Stop(sctx)
		cancel()
	}
	if a.unsub != nil {
		a.unsub()
	}
	close(a.quit)
	if a.sc != nil {
		a.sc.Close()
	}
	a.pool.Close()
}

func waitEvent(ctx context.Context, ch chan *river.Event) (*river.Event, error) {
	select {
	case ev := <-ch:
		return ev, nil
	case <-time.After(time.Minute):
		return nil, errors.New("no completion event within a minute")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// drain inserts n jobs in one InsertMany and waits for all of them to be
// completed: ops/s is the backlog's jobs per second; the latencies, from
// the insert, are the backlog's.
func (a *riverCostApp) drain(ctx context.Context, n int) (sample, error) {
	params := make([]river.InsertManyParams, n)
	chs := make([]chan *river.Event, n)
	prefix := uuid.NewString()[:8]
	for i := range params {
		p := fmt.Sprintf("%s-%d", prefix, i)
		chs[i] = a.expect(p)
		params[i] = river.InsertManyParams{Args: riverPayArgs{Payment: p}, InsertOpts: &river.InsertOpts{Queue: a.queue}}
	}
	before := a.tr.n.Load()
	t0 := time.Now()
	if _, err := a.rc.InsertMany(ctx, params); err != nil {
		return sample{}, err
	}
	s := sample{ops: n}
	for _, ch := range chs {
		if _, err := waitEvent(ctx, ch); err != nil {
			return sample{}, fmt.Errorf("%s, backlog: %w", a.c.name, err)
		}
		s.lat = append(s.lat, time.Since(t0))
	}
	s.elapsed = time.Since(t0)
	s.stmts = a.tr.n.Load() - before
	a.jobs.Add(int64(n))
	return s, nil
}

// loopImpl is the closed loop: each caller inserts a job and waits for its
// completion event, then the next.
func (a *riverCostApp) loopImpl(stats bool) *impl {
	return &impl{name: a.c.name, stmts: a.tr.n.Load, op: func(ctx context.Context, _ int) error {
		p := uuid.NewString()
		ch := a.expect(p)
		if _, err := a.rc.Insert(ctx, riverPayArgs{Payment: p}, &river.InsertOpts{Queue: a.queue}); err != nil {
			return err
		}
		ev, err := waitEvent(ctx, ch)
		if err != nil {
			return err
		}
		a.jobs.Add(1)
		if stats && ev.JobStats != nil {
			a.mu.Lock()
			a.c.wait.lat = append(a.c.wait.lat, ev.JobStats.QueueWaitDuration)
			a.c.run.lat = append(a.c.run.lat, ev.JobStats.RunDuration)
			a.c.done.lat = append(a.c.done.lat, ev.JobStats.CompleteDuration)
			a.mu.Unlock()
		}
		return nil
	}}
}

// riverCostBench measures River alone and River + Once, rounds
// interleaved: in each round each mode drains a backlog, then runs the
// closed loop.
func (b *bench) riverCostBench(ctx context.Context, sec *riverSection, schema string) error {
	set := sec.set
	sec.cost = []*riverCost{{name: "River alone"}, {name: "River + sentinel.Once", once: true}}
	apps := make([]*riverCostApp, len(sec.cost))
	defer func() {
		for _, a := range apps {
			if a != nil {
				a.close()
			}
		}
	}()
	for i, c := range sec.cost {
		c.drain.name, c.loop.name = c.name, c.name
		q := riverQueuePlain
		if c.once {
			q = riverQueueOnce
		}
		a, err := b.newRiverCostApp(ctx, c, schema, q, set)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		apps[i] = a
	}
	// Warm-up, unrecorded: a small backlog and the closed loop.
	for _, a := range apps {
		if _, err := a.drain(ctx, 2*set.callers); err != nil {
			return err
		}
		if _, err := measure(ctx, a.loopImpl(false), set.callers, b.opts.warmup, nil); err != nil {
			return err
		}
	}
	perRound := max(1, set.jobs/b.opts.rounds)
	for r := range b.opts.rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			a, c := apps[i], sec.cost[i]
			b.progress("River: round %d/%d, %s: backlog of %d jobs, then %d callers for %s", r+1, b.opts.rounds, c.name, perRound, set.callers, sec.round)
			a.phase.Store(phaseDrain)
			s, err := a.drain(ctx, perRound)
			if err != nil {
				return err
			}
			c.drain.s.add(s)
			c.drain.rounds = append(c.drain.rounds, s)
			a.phase.Store(phaseLoop)
			s, err = measure(ctx, a.loopImpl(true), set.callers, sec.round, nil)
			a.phase.Store(phaseWarm)
			if err != nil {
				return fmt.Errorf("%s, closed loop: %w", c.name, err)
			}
			c.loop.s.add(s)
			c.loop.rounds = append(c.loop.rounds, s)
		}
	}
	for i, a := range apps {
		c := sec.cost[i]
		a.mu.Lock()
		for i, ph := range []int{phaseDrain, phaseLoop} {
			c.work[i] = sample{ops: len(a.work[ph]), lat: a.work[ph]}
		}
		a.mu.Unlock()
		c.charges, c.jobs = a.charges.Load(), a.jobs.Load()
		if c.charges != c.jobs {
			return fmt.Errorf("%s: the provider counted %d charges for %d completed jobs", c.name, c.charges, c.jobs)
		}
	}
	return nil
}
