package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// measure runs im.op with the given number of workers, each in a loop, for
// d, and returns what it saw. The first error stops every worker. With a
// meter (non-nil), the sample also holds the CPU used meanwhile.
func measure(ctx context.Context, im *impl, workers int, d time.Duration, meter *cpuMeter) (sample, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var before int64
	if im.stmts != nil {
		before = im.stmts()
	}
	var cpu0 cpuReading
	if meter != nil {
		cpu0 = meter.read()
	}
	lats := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				if err := im.op(ctx, w); err != nil {
					if ctx.Err() == nil {
						cancel(fmt.Errorf("%s, worker %d: %w", im.name, w, err))
					}
					break
				}
				lat = append(lat, time.Since(t0))
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	s := sample{elapsed: time.Since(start), stmts: -1}
	if meter != nil {
		u := cpu0.to(meter.read())
		s.cpu = &u
	}
	if err := context.Cause(ctx); err != nil {
		return s, err
	}
	for _, l := range lats {
		s.ops += len(l)
		s.lat = append(s.lat, l...)
	}
	if im.stmts != nil {
		s.stmts = im.stmts() - before
	}
	return s, nil
}

// cellResult is one implementation of one operation at one worker count.
type cellResult struct {
	name   string
	s      sample   // all rounds pooled
	rounds []sample // each round on its own
	sqls   []string // distinct statements recorded during warm-up (traced impls)
}

// versus compares a with base round by round (the two ran next to each
// other in every round) and returns the medians over the rounds of the
// ops/s ratio and of the p50 ratio. Per-round ratios cancel slow phases of
// a noisy machine that a pooled ratio would charge to whichever
// implementation happened to run during them.
func versus(a, base *cellResult) (opsRatio, p50Ratio float64) {
	if a == nil || base == nil || len(a.rounds) == 0 || len(a.rounds) != len(base.rounds) {
		return math.NaN(), math.NaN()
	}
	var ops, p50 []float64
	for r := range a.rounds {
		x, y := &a.rounds[r], &base.rounds[r]
		ops = append(ops, ratio(x.opsPerSec(), y.opsPerSec()))
		p50 = append(p50, ratio(float64(x.pct(50)), float64(y.pct(50))))
	}
	return median(ops), median(p50)
}

// median of xs; NaN if any is NaN or there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 || slices.ContainsFunc(xs, math.IsNaN) {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if n := len(xs); n%2 == 0 {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	return xs[len(xs)/2]
}

// group is an operation measured for several implementations at one worker
// count. Implementations are interleaved over rounds (A B C, C B A, ...)
// so a slow phase of a noisy machine hits all of them alike.
type group struct {
	op      string
	workers int
	cells   []cellResult
}

func (g *group) cell(prefix string) *cellResult {
	for i := range g.cells {
		if len(g.cells[i].name) >= len(prefix) && g.cells[i].name[:len(prefix)] == prefix {
			return &g.cells[i]
		}
	}
	return nil
}

type setupFunc func(ctx context.Context, op string, workers int) (*impl, error)

func (b *bench) runGroup(ctx context.Context, op string, workers int, setups []setupFunc) (*group, error) {
	var impls []*impl
	defer func() {
		for _, im := range impls {
			im.close()
		}
	}()
	for _, setup := range setups {
		im, err := setup(ctx, op, workers)
		if err != nil {
			return nil, fmt.Errorf("%s: set-up: %w", op, err)
		}
		impls = append(impls, im)
	}
	g := &group{op: op, workers: workers, cells: make([]cellResult, len(impls))}
	for i, im := range impls {
		g.cells[i] = cellResult{name: im.name, s: sample{stmts: 0}}
		if im.stmts == nil {
			g.cells[i].s.stmts = -1
		}
		// Warm-up: connections, prepared statements, caches. The SQL
		// sent is recorded for the floor check.
		if im.tr != nil {
			im.tr.record.Store(true)
		}
		_, err := measure(ctx, im, workers, b.opts.warmup, nil)
		if im.tr != nil {
			im.tr.record.Store(false)
			g.cells[i].sqls = im.tr.recorded()
		}
		if err != nil {
			return nil, fmt.Errorf("%s, %d workers, warm-up: %w", op, workers, err)
		}
	}
	per := b.opts.duration / time.Duration(b.opts.rounds)
	for r := range b.opts.rounds {
		for k := range impls {
			i := k
			if r%2 == 1 {
				i = len(impls) - 1 - k
			}
			b.progress("%s, %d worker(s), round %d/%d: %s", op, workers, r+1, b.opts.rounds, impls[i].name)
			s, err := measure(ctx, impls[i], workers, per, b.cpu)
			if err != nil {
				return nil, fmt.Errorf("%s, %d workers: %w", op, workers, err)
			}
			g.cells[i].s.add(s)
			g.cells[i].rounds = append(g.cells[i].rounds, s)
		}
	}
	for _, c := range g.cells {
		b.progress("  %-60s %8s ops/s  p50 %-9s p99 %s", c.name, fmtRate(c.s.opsPerSec()), fmtDur(c.s.pct(50)), fmtDur(c.s.pct(99)))
	}
	return g, nil
}

// --- handover --------------------------------------------------------------

// pair is two contenders for one key. acquire blocks until side holds the
// key; release gives it up. prepareWait is called just before side starts a
// blocking acquire in the background; the func it returns blocks until that
// acquire is observably waiting (its first attempt failed), so the handover
// clock starts with a real waiter.
type pair interface {
	acquire(ctx context.Context, side int) error
	release(ctx context.Context, side int) error
	prepareWait(side int) func(ctx context.Context) error
}

// handoverImpl makes pairs; one pair per worker, each on its own key.
type handoverImpl struct {
	name    string
	newPair func(ctx context.Context, i int) (pair, error)
	close   func()
	warmup  int // handovers per pair not recorded
	note    string
}

type handoverResult struct {
	name    string
	workers int
	s       sample
	note    string
}

// runHandover measures, per pair, the time from the holder's release call to
// the waiter's acquire returning, until d has passed and every pair has at
// least minSamples handovers.
func (b *bench) runHandover(ctx context.Context, h *handoverImpl, pairs int, d time.Duration, minSamples int) (handoverResult, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	lats := make([][]time.Duration, pairs)
	var cpu0 cpuReading
	if b.cpu != nil {
		cpu0 = b.cpu.read()
	}
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				if ctx.Err() == nil {
					cancel(fmt.Errorf("%s, pair %d: %w", h.name, p, err))
				}
			}
			pr, err := h.newPair(ctx, p)
			if err != nil {
				fail(err)
				return
			}
			if err := pr.acquire(ctx, 0); err != nil {
				fail(err)
				return
			}
			holder := 0
			defer func() { _ = pr.release(context.WithoutCancel(ctx), holder) }()
			for i := 0; ctx.Err() == nil; i++ {
				rec := i - h.warmup
				if rec >= minSamples && !time.Now().Before(end) {
					return
				}
				w := 1 - holder
				ready := pr.prepareWait(w)
				got := make(chan error, 1)
				go func() { got <- pr.acquire(ctx, w) }()
				if err := ready(ctx); err != nil {
					fail(fmt.Errorf("waiter never waited: %w", err))
					<-got
					return
				}
				t0 := time.Now()
				if err := pr.release(ctx, holder); err != nil {
					fail(err)
					<-got
					return
				}
				if err := <-got; err != nil {
					fail(err)
					return
				}
				if rec >= 0 {
					lats[p] = append(lats[p], time.Since(t0))
				}
				holder = w
			}
		}()
	}
	wg.Wait()
	res := handoverResult{name: h.name, workers: pairs, s: sample{elapsed: time.Since(start), stmts: -1}, note: h.note}
	if b.cpu != nil {
		u := cpu0.to(b.cpu.read())
		res.s.cpu = &u // over the whole run, its few unrecorded handovers per pair included
	}
	if err := context.Cause(ctx); err != nil {
		return res, err
	}
	for _, l := range lats {
		res.s.ops += len(l)
		res.s.lat = append(res.s.lat, l...)
	}
	b.progress("  %-60s %d handovers  p50 %-9s p99 %s", h.name, res.s.ops, fmtDur(res.s.pct(50)), fmtDur(res.s.pct(99)))
	return res, nil
}
