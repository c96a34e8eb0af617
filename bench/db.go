package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// database returns the URL to benchmark against and a cleanup func:
// $DATABASE_URL when set, else a throwaway cluster from local binaries.
func database(ctx context.Context, logf func(string, ...any)) (url, source string, cleanup func(), err error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, "$DATABASE_URL", func() {}, nil
	}
	c, err := pgtemp.Start(ctx, pgtemp.Options{Logf: logf})
	if err != nil {
		return "", "", nil, fmt.Errorf("no $DATABASE_URL and no throwaway cluster: %w", err)
	}
	return c.URL(), "throwaway cluster (internal/pgtemp: fsync=off, full_page_writes=off, shared_buffers=32MB)",
		func() {
			if err := c.Close(); err != nil {
				logf("%v", err)
			}
		}, nil
}

// tracer is a pgx query tracer. It counts statements, can record the
// distinct SQL texts sent (while record is set), and can hand a per-query
// value from onStart to onEnd.
type tracer struct {
	n      atomic.Int64
	record atomic.Bool

	mu   sync.Mutex
	sqls []string

	onStart func(sql string, args []any) any // nil result: no onEnd call
	onEnd   func(v any, err error)
}

type traceKey struct{}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	if t.record.Load() {
		t.mu.Lock()
		if !slices.Contains(t.sqls, d.SQL) {
			t.sqls = append(t.sqls, d.SQL)
		}
		t.mu.Unlock()
	}
	if t.onStart != nil {
		if v := t.onStart(d.SQL, d.Args); v != nil {
			return context.WithValue(ctx, traceKey{}, v)
		}
	}
	return ctx
}

func (t *tracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if t.onEnd == nil {
		return
	}
	if v := ctx.Value(traceKey{}); v != nil {
		t.onEnd(v, d.Err)
	}
}

func (t *tracer) recorded() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.sqls)
}

// newPool opens a pool of at most maxConns connections whose statements go
// through tr (nil: no tracer).
func newPool(ctx context.Context, url string, maxConns int, tr pgx.QueryTracer) (*pgxpool.Pool, error) {
	return newPoolIn(ctx, url, "", maxConns, tr)
}

// newPoolIn is newPool connected to another database of the same server
// ("": the URL's own).
func newPoolIn(ctx context.Context, url, database string, maxConns int, tr pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if database != "" {
		cfg.ConnConfig.Database = database
	}
	cfg.MaxConns = int32(maxConns)
	if tr != nil {
		cfg.ConnConfig.Tracer = tr
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// newConn opens one dedicated connection whose statements go through tr.
func newConn(ctx context.Context, url string, tr pgx.QueryTracer) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	if tr != nil {
		cfg.Tracer = tr
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// envInfo describes the machine and the server, for the report.
type envInfo struct {
	when, goVersion, cpu, kernel string
	nproc, gomaxprocs            int
	memTotal                     string
	source                       string
	server                       string
	settings                     []string
}

func collectEnv(ctx context.Context, admin *pgxpool.Pool, source string) (envInfo, error) {
	e := envInfo{
		when:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		goVersion:  runtime.Version(),
		nproc:      runtime.NumCPU(),
		gomaxprocs: runtime.GOMAXPROCS(0),
		source:     source,
		cpu:        procField("/proc/cpuinfo", "model name"),
		memTotal:   procField("/proc/meminfo", "MemTotal"),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = strings.TrimSpace(string(b))
	}
	if err := admin.QueryRow(ctx, "SELECT version()").Scan(&e.server); err != nil {
		return e, err
	}
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "shared_buffers", "max_connections"} {
		var v string
		if err := admin.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return e, err
		}
		e.settings = append(e.settings, name+"="+v)
	}
	return e, nil
}

// procField returns the value of the first "name: value" line of a /proc
// file, or "unknown".
func procField(path, name string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// The library sends statements of concurrent callers as batches (its
// coalescing): each statement of a batch counts, is recorded, and is
// reported to onStart and onEnd once its result is read.

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t *tracer) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	ctx = t.TraceQueryStart(ctx, c, pgx.TraceQueryStartData{SQL: d.SQL, Args: d.Args})
	t.TraceQueryEnd(ctx, c, pgx.TraceQueryEndData{CommandTag: d.CommandTag, Err: d.Err})
}

func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
