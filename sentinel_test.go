package sentinel_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
)

// dbURL is the test database, shared by every test in the package; each
// test works in a schema of its own.
var dbURL string

// admin is a pool for assertions made behind the client's back.
var admin *pgxpool.Pool

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
	registerTestResultCheck()
	os.Exit(testmain.Run(m, &dbURL, &admin))
}

// counter is a pgx tracer that counts the statements a pool sends.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// env is one test's isolated world: a schema of its own, migrated.
type env struct {
	t      testing.TB
	schema string
	stmts  *counter
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, schema: "t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_"), stmts: &counter{}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE")
	})
	c := e.client(nil)
	require.NoError(t, c.Migrate(ctxT(t)))
	return e
}

// pool returns a new pool whose statements are counted in e.stmts.
func (e *env) pool(mod func(*pgxpool.Config)) *pgxpool.Pool {
	e.t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(e.t, err)
	cfg.ConnConfig.Tracer = e.stmts
	cfg.MaxConns = 8
	if mod != nil {
		mod(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(e.t, err)
	e.t.Cleanup(p.Close)
	return p
}

// client returns a client on a fresh pool in e's schema; cfg may be nil.
func (e *env) client(cfg *sentinel.Config) *sentinel.Client {
	return e.clientOn(e.pool(nil), cfg)
}

func (e *env) clientOn(p *pgxpool.Pool, cfg *sentinel.Config) *sentinel.Client {
	e.t.Helper()
	var c sentinel.Config
	if cfg != nil {
		c = *cfg
	}
	c.Schema = e.schema
	cl, err := sentinel.New(p, &c)
	require.NoError(e.t, err)
	e.t.Cleanup(cl.Close)
	return cl
}

// count returns a count(*) over a table of e's schema.
func (e *env) count(table, where string, args ...any) int {
	e.t.Helper()
	var n int
	q := fmt.Sprintf("SELECT count(*) FROM %s.%s", pgx.Identifier{e.schema}.Sanitize(), table)
	if where != "" {
		q += " WHERE " + where
	}
	require.NoError(e.t, admin.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

func (e *env) table(name string) string { return pgx.Identifier{e.schema}.Sanitize() + "." + name }

// ctxT is a test context under a hard timeout.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestMigrateConcurrentAndIdempotent(t *testing.T) {
	e := &env{t: t, schema: "t_mig_" + strings.ReplaceAll(uuid.NewString()[:8], "-", ""), stmts: &counter{}}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE")
	})
	ctx := ctxT(t)
	errs := make(chan error, 10)
	for range 10 {
		go func() {
			p, err := pgxpool.New(ctx, dbURL)
			if err != nil {
				errs <- err
				return
			}
			defer p.Close()
			c, err := sentinel.New(p, &sentinel.Config{Schema: e.schema})
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			errs <- c.Migrate(ctx)
		}()
	}
	for range 10 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, len(sentinel.Migrations(e.schema)), e.count("schema_migrations", ""))
	require.NoError(t, e.client(nil).Migrate(ctx))
	require.Equal(t, len(sentinel.Migrations(e.schema)), e.count("schema_migrations", ""))
}

func TestMigrationFSMatchesMigrate(t *testing.T) {
	fsys := sentinel.MigrationFS(`we"ird schema`)
	b, err := fs.ReadFile(fsys, "001_init.up.sql")
	require.NoError(t, err)
	require.Contains(t, string(b), `"we""ird schema".leases`)
	require.NotContains(t, string(b), "{{schema}}")

	// The shipped files, applied by hand in a fresh schema, give the same
	// tables Migrate creates.
	schema := "t_fs_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	for _, m := range sentinel.Migrations(schema) {
		_, err := admin.Exec(ctxT(t), m.SQL)
		require.NoError(t, err)
	}
	e := newEnv(t)
	cols := func(s string) string {
		var out string
		require.NoError(t, admin.QueryRow(ctxT(t), `SELECT string_agg(table_name||'.'||column_name||':'||data_type, ',' ORDER BY table_name, column_name)
			FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'schema_migrations'`, s).Scan(&out))
		return out
	}
	require.Equal(t, cols(e.schema), cols(schema))
}

// The schema name is always quoted: one with a quote, a space and upper
// case works for every statement.
func TestWeirdSchemaName(t *testing.T) {
	ctx := ctxT(t)
	schema := `We"ird Sch.ema ` + uuid.NewString()[:6]
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	p, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	defer p.Close()
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	l, err := c.Lease(ctx, "k", sentinel.WithWait())
	require.NoError(t, err)
	require.NoError(t, l.Heartbeat(ctx))
	require.NoError(t, c.VerifyToken(ctx, p, "k", l.Token()))
	require.NoError(t, l.Release(ctx))
	res, err := sentinel.Once(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	require.Equal(t, 1, res.Value)
	_, err = c.History(ctx, "k")
	require.NoError(t, err)
	_, err = c.Prune(ctx, time.Hour)
	require.NoError(t, err)
}
