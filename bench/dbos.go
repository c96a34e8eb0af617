package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DBOS Transact Go, the durable-workflow library a Go team would most
// likely pick for "run this payment exactly once on Postgres", used the way
// its documentation advises: the payment is a workflow whose ID is the
// payment's idempotency key (RunWorkflow with WithWorkflowID: a second
// call with the same ID returns the recorded result), and the charge is a
// step (RunAsStep: its output is checkpointed once it returns). DBOS keeps
// its state in a system database of its own: the bench creates one on the
// same server for the run and drops it at the end.

// dbosVersion is the version pinned in go.mod.
const dbosVersion = "v1.8.0"

const nameDBOS = "DBOS Transact Go"

// payment is the input of the DBOS workflow.
type payment struct {
	Key    string `json:"key"`
	Amount int    `json:"amount"`
}

// dbosDatabase returns the name of the run's DBOS system database, creating
// it on first use (dropped when the run ends).
func (b *bench) dbosDatabase(ctx context.Context) (string, error) {
	if len(b.extraDBs) > 0 {
		return b.extraDBs[0], nil
	}
	name := "sentinel_bench_dbos_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := b.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("creating DBOS's system database: %w", err)
	}
	b.extraDBs = append(b.extraDBs, name)
	return name, nil
}

// dbosApp is a launched DBOS context on a pool of its own, with the
// payment workflow registered.
type dbosApp struct {
	ctx   dbos.Context
	pool  *pgxpool.Pool
	pay   dbos.Workflow[payment, receipt]
	steps atomic.Int64 // charge steps run by this process
}

// dbosLogger keeps DBOS's informational logs out of the report's stderr.
func dbosLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}

// newDBOSApp launches DBOS on pool (its system database, in schema) with
// the payment workflow: one step, charge, whose reference is the workflow
// ID.
func newDBOSApp(ctx context.Context, pool *pgxpool.Pool, appName, schema string, logw io.Writer,
	charge func(ctx context.Context, ref string) (receipt, error)) (*dbosApp, error) {
	dctx, err := newDBOSContext(ctx, pool, appName, schema, logw)
	if err != nil {
		return nil, err
	}
	a := &dbosApp{ctx: dctx, pool: pool}
	a.pay = func(wctx dbos.Context, p payment) (receipt, error) {
		ref, err := dbos.GetWorkflowID(wctx) // DBOS's advice: the workflow ID as the provider's idempotency key
		if err != nil {
			return receipt{}, err
		}
		return dbos.RunAsStep(wctx, func(sctx context.Context) (receipt, error) {
			a.steps.Add(1)
			return charge(sctx, ref)
		}, dbos.WithStepName("charge"))
	}
	dbos.RegisterWorkflow(dctx, a.pay, dbos.WithWorkflowName("pay"))
	if err := dbos.Launch(dctx); err != nil {
		_ = shutdownDBOS(dctx)
		return nil, err
	}
	return a, nil
}

// newDBOSContext returns a DBOS context on pool, its system database in
// schema; DBOS creates or migrates its tables here.
func newDBOSContext(ctx context.Context, pool *pgxpool.Pool, appName, schema string, logw io.Writer) (dbos.Context, error) {
	return dbos.NewContext(ctx, dbos.Config{
		AppName:        appName,
		SystemDBPool:   pool,
		DatabaseSchema: schema,
		Logger:         dbosLogger(logw),
	})
}

func shutdownDBOS(dctx dbos.Context) error { return dbos.Shutdown(dctx, 10*time.Second) }

// run runs (or, for a recorded key, replays) the payment of key and waits
// for its result.
func (a *dbosApp) run(key string) (receipt, error) {
	h, err := dbos.RunWorkflow(a.ctx, a.pay, payment{Key: key, Amount: 9900}, dbos.WithWorkflowID(key))
	if err != nil {
		return receipt{}, err
	}
	return h.GetResult()
}

func (a *dbosApp) close() {
	_ = shutdownDBOS(a.ctx)
	a.pool.Close()
}

// setupDBOS returns DBOS's implementation of a payment operation, on a
// pool of b.maxConns+1 connections: DBOS holds one of its pool's
// connections for LISTEN for as long as it runs, so the extra one leaves it
// b.maxConns for the work, as many as Sentinel has (whose listener, started
// only by waiters, has a connection of its own outside the pool).
func (b *bench) setupDBOS(ctx context.Context, op string, workers int) (*impl, error) {
	db, err := b.dbosDatabase(ctx)
	if err != nil {
		return nil, err
	}
	tr := &tracer{}
	pool, err := newPoolIn(ctx, b.url, db, b.maxConns+1, tr)
	if err != nil {
		return nil, err
	}
	a, err := newDBOSApp(ctx, pool, "sentinel-bench", "dbos", b.logw, func(ctx context.Context, _ string) (receipt, error) { return charge(ctx) })
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("DBOS: %w", err)
	}
	im := &impl{stmts: tr.n.Load, close: a.close}
	keys := newKeyGen(workers)
	check := func(r receipt, err error) error {
		if err == nil && r.Amount != 9900 {
			err = fmt.Errorf("DBOS returned %+v", r)
		}
		return err
	}
	switch op {
	case opOnceFresh:
		im.name = fmt.Sprintf("%s %s (workflow + step)", nameDBOS, dbosVersion)
		im.op = func(_ context.Context, w int) error { return check(a.run(keys.next(w))) }
	case opOnceReplay:
		im.name = fmt.Sprintf("%s %s (replay: RunWorkflow, same ID)", nameDBOS, dbosVersion)
		for w := range workers {
			if err := check(a.run(fmt.Sprintf("%sreplay-%d", keys.prefix, w))); err != nil {
				a.close()
				return nil, err
			}
		}
		ran := a.steps.Load()
		im.op = func(_ context.Context, w int) error {
			if err := check(a.run(fmt.Sprintf("%sreplay-%d", keys.prefix, w))); err != nil {
				return err
			}
			if n := a.steps.Load(); n != ran {
				return fmt.Errorf("DBOS replay ran the charge step again (%d steps, want %d)", n, ran)
			}
			return nil
		}
	default:
		a.close()
		return nil, fmt.Errorf("DBOS: unknown operation %q", op)
	}
	return im, nil
}
