package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sentinel-coordination/sentinel"
)

// The River crash table: payment jobs are worked by a River worker process
// that is SIGKILLed in the middle of the charge (the provider charged; the
// worker had not returned) or after the worker returned (a query tracer
// stops every statement from then on, River's completion among them, and
// the parent kills the process there). River's rescuer finds the job stuck
// once RescueStuckJobsAfter has passed and makes it retryable; its
// scheduler makes it available again; a fresh worker process, River's
// leader, works it (attempt 2). A provider table counts the charges per
// payment. Every trial runs one job of every mode at each kill point, in
// two killed processes (one per kill point, each on its own queue) and one
// retry process.

// Roles of a River crash-table process.
const (
	riverRoleInFlight = "in-flight" // works crash_in_flight; hangs after each charge
	riverRoleAfter    = "after"     // works crash_after_return; stops River's statements once every worker returned
	riverRoleRetry    = "retry"     // River's leader: rescues and works the redelivered jobs
)

const (
	riverChildEnv  = "SENTINEL_BENCH_RIVER_CHILD"  // the role, in a River crash-table process
	riverConfigEnv = "SENTINEL_BENCH_RIVER_CONFIG" // its riverCrashConfig, as JSON
)

func init() {
	if role := os.Getenv(riverChildEnv); role != "" {
		os.Exit(runRiverChild(role))
	}
}

// riverMode is how a worker charges, in the crash table.
type riverMode struct {
	lib      string // the worker's code path: "river", "once", "once-rerun"
	provider string
	name     string
	how      string
}

func riverCrashModes() []riverMode {
	return []riverMode{
		{lib: "river", provider: providerPlain, name: "River alone",
			how: "the worker charges the provider; River redelivers the job and the fresh worker charges again"},
		{lib: "river", provider: providerIdempotent, name: "River alone, provider deduplicating by payment id",
			how: "as River alone, the payment id passed to a provider that charges once per reference"},
		{lib: "once", provider: providerPlain, name: "River + sentinel.Once",
			how: "the charge inside sentinel.Once(ctx, client, \"pay/\"+id, fn, WithWait()); the redelivered job's Once returns the stored receipt, or ErrUncertain after a charge cut off mid-way, which the worker turns into river.JobCancel for an operator"},
		{lib: "once-rerun", provider: providerIdempotent, name: "River + Once + WithRerun(3), provider deduplicating by EffectKey",
			how: "as River + sentinel.Once with WithRerun(3): after a charge cut off mid-way the redelivered job's Once runs fn again (attempt 2), passing sentinel.EffectKey(ctx), the same on every attempt, to a provider that charges once per reference"},
	}
}

// riverCrashConfig is what a River crash-table process needs.
type riverCrashConfig struct {
	URL         string        `json:"url"`
	Schema      string        `json:"schema"`       // Sentinel's tables and the provider's
	RiverSchema string        `json:"river_schema"` // River's
	Expect      int           `json:"expect"`       // the killed processes: jobs to take before the kill
	Rescue      time.Duration `json:"rescue"`       // River's JobTimeout and RescueStuckJobsAfter
	TTL         time.Duration `json:"ttl"`          // Sentinel's lease TTL
}

// riverCrashCell is one mode and kill point over all its trials.
type riverCrashCell struct {
	mode        riverMode
	kill        string
	trials      int
	twice       int // trials in which the customer was charged more than once
	operator    int // trials left for an operator (ErrUncertain: the job cancelled)
	success     int // trials the redelivered job completed
	other       []string
	redelivered int    // trials whose job River worked again (attempt 2 or more)
	requests    int    // charge requests that reached the provider, all trials
	toResult    sample // from the kill to the redelivered job's outcome
}

type riverCrash struct {
	rescue time.Duration
	ttl    time.Duration
	cells  []*riverCrashCell
}

func (s *riverCrash) cell(lib, provider, kill string) *riverCrashCell {
	if s == nil {
		return nil
	}
	for _, c := range s.cells {
		if c.mode.lib == lib && c.mode.provider == provider && c.kill == kill {
			return c
		}
	}
	return nil
}

// riverResult is a retry process's line for one redelivered job:
// "result <payment> <attempt> <outcome>".
type riverResult struct {
	payment string
	attempt int
	outcome string // "ok", "uncertain", or "error ..."
}

func parseRiverResult(line string) (riverResult, bool) {
	f := strings.SplitN(line, " ", 4)
	if len(f) != 4 || f[0] != "result" {
		return riverResult{}, false
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || f[1] == "" || f[3] == "" {
		return riverResult{}, false
	}
	return riverResult{payment: f[1], attempt: n, outcome: f[3]}, true
}

// record adds one trial: the redelivered job's result, the provider's
// charges and requests for the payment, and the time from the kill.
func (c *riverCrashCell) record(r riverResult, charges, requests int, took time.Duration) {
	c.trials++
	c.requests += requests
	if charges > 1 {
		c.twice++
	}
	if r.attempt > 1 {
		c.redelivered++
	}
	switch r.outcome {
	case "ok":
		c.success++
	case "uncertain":
		c.operator++
	default:
		c.other = append(c.other, r.outcome)
	}
	c.toResult.add(sample{ops: 1, lat: []time.Duration{took}})
}

// riverCrashBench runs the crash table: trials rounds, each with one job
// of every mode at both kill points.
func (b *bench) riverCrashBench(ctx context.Context, set riverSettings, schema string) (*riverCrash, error) {
	if _, err := b.admin.Exec(ctx, fmt.Sprintf(providerDDL, pgx.Identifier{b.schema}.Sanitize())); err != nil {
		return nil, err
	}
	ins, err := river.NewClient(riverpgxv5.New(b.admin), &river.Config{Schema: schema, Logger: dbosLogger(b.logw)})
	if err != nil {
		return nil, err
	}
	sec := &riverCrash{rescue: set.rescue, ttl: set.ttl}
	modes := riverCrashModes()
	for _, kill := range []string{killInFlight, killAfterReturn} {
		for _, m := range modes {
			sec.cells = append(sec.cells, &riverCrashCell{mode: m, kill: kill})
		}
	}
	cfg := riverCrashConfig{URL: b.url, Schema: b.schema, RiverSchema: schema, Expect: len(modes), Rescue: set.rescue, TTL: set.ttl}
	for i := range set.trials {
		if err := b.riverCrashTrial(ctx, sec, ins, cfg); err != nil {
			return nil, fmt.Errorf("trial %d: %w", i+1, err)
		}
		b.progress("River crash table: trial %d/%d done (%d jobs)", i+1, set.trials, len(sec.cells))
	}
	return sec, nil
}

// riverCrashTrial inserts one job per cell, kills the two working
// processes at their points, waits for River's rescue horizon, and lets a
// fresh process work the redelivered jobs.
func (b *bench) riverCrashTrial(ctx context.Context, sec *riverCrash, ins *river.Client[pgx.Tx], cfg riverCrashConfig) error {
	byPayment := map[string]*riverCrashCell{}
	var params []river.InsertManyParams
	for _, c := range sec.cells {
		p := "pay-" + uuid.NewString()
		byPayment[p] = c
		q := riverQueueInFlight
		if c.kill == killAfterReturn {
			q = riverQueueAfter
		}
		params = append(params, river.InsertManyParams{Args: riverPayArgs{Payment: p, Mode: c.mode.lib, Provider: c.mode.provider},
			InsertOpts: &river.InsertOpts{Queue: q}})
	}
	if _, err := ins.InsertMany(ctx, params); err != nil {
		return err
	}
	start := func(role string) (*worker, error) {
		js, err := json.Marshal(cfg)
		if err != nil {
			return nil, err
		}
		return startProcess(riverChildEnv+"="+role, riverConfigEnv+"="+string(js))
	}
	inFlight, err := start(riverRoleInFlight)
	if err != nil {
		return err
	}
	defer inFlight.stop()
	after, err := start(riverRoleAfter)
	if err != nil {
		return err
	}
	defer after.stop()
	killedAt := map[string]time.Time{}
	for range cfg.Expect {
		line, err := inFlight.next(ctx, time.Minute)
		p, ok := strings.CutPrefix(line, "charged ")
		if err != nil || !ok || byPayment[p] == nil {
			return fmt.Errorf("in-flight worker said %q (%v), want \"charged <payment>\"; its stderr:\n%s", line, err, inFlight.stderr())
		}
		killedAt[p] = time.Time{}
	}
	inFlight.stop()
	now := time.Now()
	for p := range killedAt {
		killedAt[p] = now
	}
	if line, err := after.next(ctx, time.Minute); err != nil || line != "returned" {
		return fmt.Errorf("after-return worker said %q (%v), want \"returned\"; its stderr:\n%s", line, err, after.stderr())
	}
	after.stop()
	last := time.Now()
	for p, c := range byPayment {
		if c.kill == killAfterReturn {
			killedAt[p] = last
		}
	}
	// River rescues a job running for longer than RescueStuckJobsAfter
	// (and its JobTimeout); the retry process, River's leader, rescues it
	// at its start.
	select {
	case <-time.After(cfg.Rescue + 100*time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	retry, err := start(riverRoleRetry)
	if err != nil {
		return err
	}
	defer retry.stop()
	results := map[string]riverResult{}
	for len(results) < len(byPayment) {
		line, err := retry.next(ctx, time.Minute)
		if err != nil {
			return fmt.Errorf("retry worker: %v (%d of %d jobs reported); its stderr:\n%s", err, len(results), len(byPayment), retry.stderr())
		}
		r, ok := parseRiverResult(line)
		if !ok {
			return fmt.Errorf("retry worker said %q; its stderr:\n%s", line, retry.stderr())
		}
		c := byPayment[r.payment]
		if _, seen := results[r.payment]; c == nil || seen { // a job of an earlier trial, or a repeat
			continue
		}
		took := time.Since(killedAt[r.payment])
		r.outcome = strings.Join(strings.Fields(r.outcome), " ")
		results[r.payment] = r
		var charges, requests int
		if err := b.admin.QueryRow(ctx, "SELECT count(*), coalesce(sum(requests), 0) FROM "+
			pgx.Identifier{b.schema, "provider_charges"}.Sanitize()+" WHERE payment = $1", r.payment).Scan(&charges, &requests); err != nil {
			return err
		}
		c.record(r, charges, requests, took)
	}
	retry.finish(30 * time.Second) // a graceful stop: River resigns its leadership for the next trial
	return nil
}

// --- the River crash-table process ------------------------------------------

// riverCrashWorker works the crash table's jobs in a child process.
type riverCrashWorker struct {
	river.WorkerDefaults[riverPayArgs]
	role    string
	cfg     riverCrashConfig
	prov    *pgxpool.Pool // the provider: another service, not gated
	sc      *sentinel.Client
	g       *gate
	arrived atomic.Int32
	release chan struct{}
}

// Work charges the payment as the job's mode says; the in-flight process
// hangs after the charge, the after-return one once every worker of its
// batch returned, and the retry process reports each outcome.
func (w *riverCrashWorker) Work(ctx context.Context, job *river.Job[riverPayArgs]) error {
	a := job.Args
	charge := func(ctx context.Context, ref string) (receipt, error) {
		var id int64
		if err := w.prov.QueryRow(ctx, chargeSQL(w.cfg.Schema, a.Provider), a.Payment, ref).Scan(&id); err != nil {
			return receipt{}, err
		}
		if w.role == riverRoleInFlight {
			say("charged " + a.Payment)
			hang()
		}
		return receipt{ID: fmt.Sprintf("ch_%d", id), Amount: 9900}, nil
	}
	var err error
	switch a.Mode {
	case "river":
		_, err = charge(ctx, a.Payment)
	case "once", "once-rerun":
		opts := []sentinel.Option{sentinel.WithTTL(w.cfg.TTL), sentinel.WithHardTTL(time.Minute), sentinel.WithWait()}
		ref := func(context.Context) string { return a.Payment }
		if a.Mode == "once-rerun" {
			opts = append(opts, sentinel.WithRerun(3))
			ref = sentinel.EffectKey
		}
		_, err = sentinel.Once(ctx, w.sc, "pay/"+a.Payment, func(ctx context.Context) (receipt, error) { return charge(ctx, ref(ctx)) }, opts...)
	default:
		err = fmt.Errorf("unknown mode %q", a.Mode)
	}
	switch w.role {
	case riverRoleAfter:
		// Every job of the batch holds here until the last one arrives,
		// so that River records none of them; the last arms the gate,
		// which stops River's next statement (its completion) and tells
		// the parent.
		if int(w.arrived.Add(1)) == w.cfg.Expect {
			w.g.armed.Store(true)
			close(w.release)
		}
		<-w.release
	case riverRoleRetry:
		out := "ok"
		switch {
		case errors.Is(err, sentinel.ErrUncertain):
			out = "uncertain"
		case err != nil:
			out = "error " + err.Error()
		}
		say(fmt.Sprintf("result %s %d %s", a.Payment, job.Attempt, strings.Join(strings.Fields(out), " ")))
	}
	if errors.Is(err, sentinel.ErrUncertain) {
		// An earlier delivery crossed into the charge without an outcome:
		// stop retrying, an operator decides (examples/river).
		return river.JobCancel(err)
	}
	return err
}

// runRiverChild is a River crash-table process in role.
func runRiverChild(role string) int {
	var cfg riverCrashConfig
	if err := json.Unmarshal([]byte(os.Getenv(riverConfigEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	quit := make(chan struct{})
	go func() { // stdin closed: the parent is gone, or asks the retry process to stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		if role != riverRoleRetry {
			os.Exit(3)
		}
		close(quit)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := riverChild(ctx, role, cfg, quit); err != nil {
		fmt.Fprintln(os.Stderr, "river child:", err)
		return 1
	}
	return 0
}

func riverChild(ctx context.Context, role string, cfg riverCrashConfig, quit <-chan struct{}) error {
	prov, err := newPool(ctx, cfg.URL, 2, nil)
	if err != nil {
		return err
	}
	g := &gate{}
	pool, err := newPool(ctx, cfg.URL, 8, g) // River's and Sentinel's
	if err != nil {
		return err
	}
	sc, err := sentinel.New(pool, &sentinel.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	w := &riverCrashWorker{role: role, cfg: cfg, prov: prov, sc: sc, g: g, release: make(chan struct{})}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	queues := map[string]river.QueueConfig{}
	switch role {
	case riverRoleInFlight:
		queues[riverQueueInFlight] = river.QueueConfig{MaxWorkers: cfg.Expect}
	case riverRoleAfter:
		queues[riverQueueAfter] = river.QueueConfig{MaxWorkers: cfg.Expect}
	case riverRoleRetry:
		queues[riverQueueInFlight] = river.QueueConfig{MaxWorkers: 10}
		queues[riverQueueAfter] = river.QueueConfig{MaxWorkers: 10}
	default:
		return fmt.Errorf("unknown role %q", role)
	}
	rcfg := riverConfig(cfg.RiverSchema, dbosLogger(os.Stderr), workers, queues)
	// River rescues a job running longer than RescueStuckJobsAfter (an
	// hour by default), and only once its JobTimeout (a minute by
	// default) has passed: both short, so that a trial takes seconds.
	rcfg.JobTimeout, rcfg.RescueStuckJobsAfter = cfg.Rescue, cfg.Rescue
	// Only the retry process takes part in River's leader election: it is
	// the leader, whose rescuer and scheduler redeliver the killed jobs,
	// at once rather than after a dead leader's term.
	rcfg.LeaderElectionDisabled = role != riverRoleRetry
	rc, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return err
	}
	if err := rc.Start(ctx); err != nil {
		return err
	}
	select {
	case <-quit:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	err = rc.Stop(sctx)
	sc.Close()
	return err
}
