package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The "many callers" section (issue #20): many concurrent callers on one
// client whose pool is smaller than the number of callers, as in a service
// with a pool of 8 and dozens of requests in flight. Sentinel, the
// per-operation floor and pglock run interleaved, each with a pool of
// -many-pool connections.
//
// The floor here is the bare work as autocommit statements with nothing
// around them, on tables of its own:
//   - Once: an INSERT claim, an UPDATE to executing, an UPDATE to completed
//     with the result;
//   - lease: an upsert that mints a token, and a DELETE.

// Operations of the section (distinct from the throughput section's, so
// the report keeps them apart).
const (
	opManyOnce  = "many callers: Once, fresh key"
	opManyLease = "many callers: lease acquire + release"
)

const manyFloorDDL = `
CREATE TABLE IF NOT EXISTS %[1]s.many_exec (
    key text PRIMARY KEY, state text NOT NULL, owner text NOT NULL, token bigint NOT NULL,
    result bytea, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS %[1]s.many_lease (
    key text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires_at timestamptz NOT NULL);
CREATE SEQUENCE IF NOT EXISTS %[1]s.many_token;`

// manyFloor runs the section's floor statements.
type manyFloor struct {
	claim, executing, complete, acquire, release string
}

func newManyFloor(schema string) *manyFloor {
	q := pgx.Identifier{schema}.Sanitize()
	return &manyFloor{
		claim: `INSERT INTO ` + q + `.many_exec (key, state, owner, token) VALUES ($1, 'claimed', $2, nextval('` + q + `.many_token'))
ON CONFLICT (key) DO NOTHING RETURNING token`,
		executing: `UPDATE ` + q + `.many_exec SET state = 'executing', updated_at = now() WHERE key = $1 AND owner = $2 AND token = $3 AND state = 'claimed'`,
		complete:  `UPDATE ` + q + `.many_exec SET state = 'completed', result = $4, updated_at = now() WHERE key = $1 AND owner = $2 AND token = $3 AND state = 'executing'`,
		acquire: `INSERT INTO ` + q + `.many_lease AS t (key, owner, token, expires_at) VALUES ($1, $2, nextval('` + q + `.many_token'), now() + interval '3 seconds')
ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = excluded.token, expires_at = excluded.expires_at
WHERE t.expires_at <= clock_timestamp() RETURNING token`,
		release: `DELETE FROM ` + q + `.many_lease WHERE key = $1 AND owner = $2 AND token = $3`,
	}
}

func (b *bench) setupManyFloor(ctx context.Context, opName string, workers int) (*impl, error) {
	tr := &tracer{}
	pool, err := newPool(ctx, b.url, b.maxConns, tr)
	if err != nil {
		return nil, err
	}
	f := newManyFloor(b.schema)
	keys := newKeyGen(workers)
	owner := "floor-" + keys.prefix
	im := &impl{stmts: tr.n.Load, close: pool.Close}
	switch opName {
	case opManyOnce:
		im.name = "floor: INSERT claim + UPDATE executing + UPDATE completed"
		im.op = func(ctx context.Context, w int) error {
			key := keys.next(w)
			var token int64
			if err := pool.QueryRow(ctx, f.claim, key, owner).Scan(&token); err != nil {
				return fmt.Errorf("floor claim: %w", err)
			}
			if t, err := pool.Exec(ctx, f.executing, key, owner, token); err != nil || t.RowsAffected() != 1 {
				return fmt.Errorf("floor executing: %v", err)
			}
			v, _ := charge(ctx)
			data, err := json.Marshal(v)
			if err != nil {
				return err
			}
			if t, err := pool.Exec(ctx, f.complete, key, owner, token, data); err != nil || t.RowsAffected() != 1 {
				return fmt.Errorf("floor complete: %v", err)
			}
			return nil
		}
	case opManyLease:
		im.name = "floor: upsert minting a token + DELETE"
		im.op = func(ctx context.Context, w int) error {
			key := fmt.Sprintf("%slease-%d", keys.prefix, w)
			var token int64
			if err := pool.QueryRow(ctx, f.acquire, key, owner).Scan(&token); err != nil {
				return fmt.Errorf("floor acquire: %w", err)
			}
			if t, err := pool.Exec(ctx, f.release, key, owner, token); err != nil || t.RowsAffected() != 1 {
				return fmt.Errorf("floor release: %v", err)
			}
			return nil
		}
	default:
		pool.Close()
		return nil, fmt.Errorf("many floor: unknown operation %q", opName)
	}
	return im, nil
}

// manyOp maps the section's operations to the implementations' own.
func manyOp(op string) string {
	switch op {
	case opManyOnce:
		return opOnceFresh
	case opManyLease:
		return opLease
	}
	return op
}

// renamed wraps a setup of the throughput section for the section's
// operation names.
func renamed(setup setupFunc) setupFunc {
	return func(ctx context.Context, op string, workers int) (*impl, error) {
		return setup(ctx, manyOp(op), workers)
	}
}

// manyCallers runs the section: for each caller count, fresh Once (floor,
// Sentinel) and lease acquire + release (floor, Sentinel, pglock), every
// implementation with a pool of -many-pool connections.
func (b *bench) manyCallers(ctx context.Context) ([]*group, error) {
	if _, err := b.admin.Exec(ctx, fmt.Sprintf(manyFloorDDL, pgx.Identifier{b.schema}.Sanitize())); err != nil {
		return nil, err
	}
	saved := b.maxConns
	b.maxConns = b.opts.manyPool
	defer func() { b.maxConns = saved }()
	var out []*group
	for _, callers := range b.opts.manyCallers {
		for _, op := range []string{opManyOnce, opManyLease} {
			setups := []setupFunc{b.setupManyFloor, renamed(b.setupSentinel)}
			if op == opManyLease {
				setups = append(setups, renamed(b.setupPglock))
			}
			b.progress("many callers: %s, %d callers, pool %d", op, callers, b.opts.manyPool)
			g, err := b.runGroup(ctx, op, callers, setups)
			if err != nil {
				return nil, err
			}
			out = append(out, g)
		}
	}
	return out, nil
}

// manyReport renders the section.
func (r *report) manyReport(p func(string, ...any)) {
	if len(r.many) == 0 {
		return
	}
	p("## Many callers\n\n")
	p("Concurrent callers on one client, every implementation with a pool of %d connections (Sentinel, the floor and pglock alike), interleaved over %d rounds of %s. The floor is the bare work as autocommit statements on tables of its own: fresh Once = an INSERT claim, an UPDATE to executing, an UPDATE to completed with the result; lease = an upsert that mints a token and a DELETE. Ratios are medians of per-round ratios (ops/s above 1 is better, p50 below 1 is better).\n\n",
		r.opts.manyPool, r.opts.rounds, (r.opts.duration / time.Duration(r.opts.rounds)).String())
	t := newTable("operation", ">callers", "implementation", ">ops/s", ">p50", ">p99", ">stmts/op", "vs floor (ops/s · p50)", "vs pglock (ops/s · p50)")
	for _, g := range r.many {
		floor, pgl := g.cell(nameFloor), g.cell(namePglock)
		for i := range g.cells {
			c := &g.cells[i]
			t.add(g.op, fmt.Sprint(g.workers), c.name, fmtRate(c.s.opsPerSec()), fmtDur(c.s.pct(50)), fmtDur(c.s.pct(99)),
				fmtStmts(&c.s), vs(c, floor), vs(c, pgl))
		}
	}
	p("%s\n", t)
	p("### Targets (issue #20)\n\n")
	t = newTable("target", ">measured", ">limit", "result")
	for _, tg := range r.manyTargets() {
		t.add(tg.name, tg.measured, tg.limit, tg.result())
	}
	p("%s\n", t)
	p("### Targets (issue #27: the fresh path at its limit)\n\n")
	p("Against the naive floor of this section (three autocommit statements per fresh Once), except the replay, which is against one primary-key SELECT of the same row (the throughput section's floor, measured in the same run).\n\n")
	t = newTable("target", ">measured", ">limit", "result")
	for _, tg := range r.limitTargets() {
		t.add(tg.name, tg.measured, tg.limit, tg.result())
	}
	p("%s\n", t)
	r.manyCPU(p)
}

// manyCPU reports, when the server ran on this machine, the CPU per
// operation of the largest caller count's cells, and what Sentinel's would
// reach with every CPU busy against the floor's measured rate: the highest
// ratio a throughput target can ask of this machine with these statements.
func (r *report) manyCPU(p func(string, ...any)) {
	most := slices.Max(r.opts.manyCallers)
	var lines []string
	for _, op := range []string{opManyOnce, opManyLease} {
		g := r.manyGroup(op, most)
		if g == nil {
			continue
		}
		floor, sen := g.cell(nameFloor), g.cell(nameSentinel)
		if floor == nil || sen == nil {
			continue
		}
		_, _, _, ceil, ok := cpuCeiling(&sen.s, r.env.nproc)
		if !ok || floor.s.opsPerSec() <= 0 {
			continue
		}
		for _, c := range []*cellResult{floor, sen} {
			lines = append(lines, "- "+op+", "+cpuLine(c.name, &c.s, r.env.nproc))
		}
		lines = append(lines, fmt.Sprintf("- %s: Sentinel with every CPU busy would be %.2fx the floor's measured ops/s", op, ceil/floor.s.opsPerSec()))
	}
	if len(lines) == 0 {
		return
	}
	p("CPU per operation at %d callers (the server runs on this machine: its postmaster's processes, from /proc; this process from getrusage; %d CPUs). The last line of each operation is the ceiling a throughput ratio meets on this machine with these statements, however the idle time were filled:\n\n%s\n\n",
		most, r.env.nproc, strings.Join(lines, "\n"))
}

// manyGroup is the many-callers section's group of op with callers.
func (r *report) manyGroup(op string, callers int) *group {
	for _, g := range r.many {
		if g.op == op && g.workers == callers {
			return g
		}
	}
	return nil
}

// limitTargets evaluates the goals of issue #27 (section 2) on this run's
// figures: a fresh Once in two round trips, a replay in one.
func (r *report) limitTargets() []target {
	most := slices.Max(r.opts.manyCallers)
	if most < 64 {
		most = 64 // not measured: reported as such
	}
	pool := r.opts.manyPool
	rows := []struct {
		name    string
		g       *group
		limit   float64
		latency bool // p50 ratio (≤ limit), else ops/s ratio (≥ limit)
	}{
		{"fresh Once latency (p50), 1 caller, vs the three-statement floor", r.manyGroup(opManyOnce, 1), 0.8, true},
		{"Once replay latency (p50), 1 worker, vs one primary-key SELECT", r.group(opOnceReplay, 1), 1.2, true},
		{"Once replay latency (p50), 1 worker, key not remembered, vs one primary-key SELECT", r.group(opOnceReplay, 1), 1.2, true},
		{fmt.Sprintf("fresh Once throughput, %d callers, pool %d, vs floor", most, pool), r.manyGroup(opManyOnce, most), 3.5, false},
		{fmt.Sprintf("lease acquire+release throughput, %d callers, pool %d, vs floor", most, pool), r.manyGroup(opManyLease, most), 4, false},
	}
	var out []target
	for _, row := range rows {
		o, p := math.NaN(), math.NaN()
		if row.g != nil {
			sen := row.g.cell(nameSentinel)
			if strings.Contains(row.name, "not remembered") {
				sen = row.g.cell(nameSentinelReplayCold)
			}
			o, p = versus(sen, row.g.cell(nameFloor))
		}
		if row.latency {
			out = append(out, ratioTarget(row.name, p, row.limit, true))
		} else {
			out = append(out, ratioTarget(row.name, o, row.limit, false))
		}
	}
	if slices.Contains(r.env.settings, "fsync=off") {
		for i := range out {
			out[i].unjudged = "fsync=off (the targets are for a durable server)"
		}
	}
	return out
}

// manyTargets evaluates the goals of issue #20 on the section's figures.
func (r *report) manyTargets() []target {
	find := r.manyGroup
	var out []target
	lone, most := slices.Min(r.opts.manyCallers), slices.Max(r.opts.manyCallers)
	if g := find(opManyOnce, most); g != nil {
		o, _ := versus(g.cell(nameSentinel), g.cell(nameFloor))
		out = append(out, ratioTarget(fmt.Sprintf("fresh Once throughput, %d callers, pool %d, vs floor", most, r.opts.manyPool), o, 2, false))
	}
	if g := find(opManyLease, most); g != nil {
		o, _ := versus(g.cell(nameSentinel), g.cell(nameFloor))
		out = append(out, ratioTarget(fmt.Sprintf("lease acquire+release throughput, %d callers, pool %d, vs floor", most, r.opts.manyPool), o, 2, false))
		o, _ = versus(g.cell(nameSentinel), g.cell(namePglock))
		out = append(out, ratioTarget(fmt.Sprintf("lease acquire+release throughput, %d callers, pool %d, vs pglock", most, r.opts.manyPool), o, 2, false))
	}
	if g := find(opManyOnce, lone); g != nil && lone == 1 {
		_, p := versus(g.cell(nameSentinel), g.cell(nameFloor))
		out = append(out, ratioTarget("fresh Once latency (p50), 1 caller, vs floor", p, 1.15, true))
	}
	// The targets are for a durable server: with fsync off a commit costs
	// almost nothing, so there is little for callers to share, and the
	// floor's narrow rows stand against Sentinel's history writes alone.
	if slices.Contains(r.env.settings, "fsync=off") {
		for i := range out {
			out[i].unjudged = "fsync=off (the targets are for a durable server)"
		}
	}
	return out
}
