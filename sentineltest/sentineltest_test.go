package sentineltest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

func TestMain(m *testing.M) {
	code := Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			// The pgtemp launcher keeps one goroutine (a locked OS thread
			// that forks servers) for the life of the process.
			if err := goleak.Find(goleak.IgnoreTopFunction("github.com/sentinel-coordination/sentinel/internal/pgtemp.startOnLockedThread.func1.1")); err != nil {
				os.Stderr.WriteString("goleak: " + err.Error() + "\n")
				code = 1
			}
		}
	}
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// schemaExists asks the shared database, outside any test schema.
func schemaExists(t *testing.T, schema string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestNewMigratedAndDropped(t *testing.T) {
	var schema string
	t.Run("user", func(t *testing.T) {
		c := New(t)
		schema = Schema(t)
		if c.Config().Schema != schema {
			t.Fatalf("client schema %q, test schema %q", c.Config().Schema, schema)
		}
		res, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 7, nil })
		if err != nil || res.Value != 7 {
			t.Fatalf("Once: %v, %v", res, err)
		}
		// A second client shares the schema: it replays.
		res, err = sentinel.Once(ctxT(t), New(t), "k", func(context.Context) (int, error) { return 8, nil })
		if err != nil || !res.Cached || res.Value != 7 {
			t.Fatalf("second client: %+v, %v", res, err)
		}
		if !schemaExists(t, schema) {
			t.Fatal("schema missing while the test runs")
		}
	})
	if schemaExists(t, schema) {
		t.Fatalf("schema %s still exists after the test ended", schema)
	}
}

func TestSubtestsAreIsolated(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			c := New(t)
			// Each subtest runs its key afresh: nothing leaks between them.
			res, err := sentinel.Once(ctxT(t), c, "same-key", func(context.Context) (string, error) { return Schema(t), nil })
			if err != nil || res.Cached {
				t.Fatalf("Once: %+v, %v", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[res.Value] {
				t.Errorf("schema %s shared", res.Value)
			}
			seen[res.Value] = true
		})
	}
}

func TestPoolSearchPath(t *testing.T) {
	p := Pool(t)
	if p != Pool(t) {
		t.Fatal("Pool returned a different pool within one test")
	}
	ctx := ctxT(t)
	if _, err := p.Exec(ctx, "CREATE TABLE widgets (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := p.QueryRow(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 'widgets'").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if schema != Schema(t) {
		t.Fatalf("widgets created in %q, want the test schema %q", schema, Schema(t))
	}
	var traced bool
	own := Pool(t, WithPoolConfig(func(c *pgxpool.Config) { traced = true; c.MaxConns = 2 }))
	if !traced || own == p || own.Config().MaxConns != 2 {
		t.Fatalf("WithPoolConfig not applied (applied %v, same pool %v)", traced, own == p)
	}
	if err := own.QueryRow(ctx, "SELECT count(*) FROM widgets").Scan(new(int)); err != nil {
		t.Fatalf("own pool does not see the test schema: %v", err)
	}
}

func TestWithConfig(t *testing.T) {
	c := New(t, WithConfig(sentinel.Config{Namespace: "billing", Schema: "ignored"}))
	if c.Config().Namespace != "billing" || c.Config().Schema != Schema(t) {
		t.Fatalf("config %+v", c.Config())
	}
}

// Without Main the server is reference-counted by the tests using it.
func TestServerRefCounting(t *testing.T) {
	server.mu.Lock()
	savedURL, savedStop, savedRefs, savedInMain, savedOwner := server.url, server.stop, server.refs, server.inMain, server.owner
	stops := 0
	server.url, server.stop, server.refs, server.inMain, server.owner = "postgres://fake", func() { stops++ }, 0, false, nil
	server.mu.Unlock()
	defer func() {
		server.mu.Lock()
		server.url, server.stop, server.refs, server.inMain, server.owner = savedURL, savedStop, savedRefs, savedInMain, savedOwner
		server.mu.Unlock()
	}()

	t.Run("a", func(t *testing.T) {
		if u := DatabaseURL(t); u != "postgres://fake" {
			t.Fatalf("url %q", u)
		}
		t.Run("nested", func(t *testing.T) { _ = DatabaseURL(t) })
		if stops != 0 || server.refs != 1 {
			t.Fatalf("stopped %d times with %d refs while a test still uses the server", stops, server.refs)
		}
	})
	if stops != 1 || server.stop != nil || server.refs != 0 {
		t.Fatalf("after the last user: %d stops, refs %d, running %v", stops, server.refs, server.stop != nil)
	}
}

// The Docker path on its own, when an engine is reachable.
func TestDockerFallback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	u, cleanup, err := testdb.Docker(ctx, t.Logf)
	if errors.Is(err, testdb.ErrNoDocker) {
		t.Skipf("skipping the Docker fallback: %v (start a Docker engine to run it)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// fakeTB runs cleanups on demand, so a benchmark can measure a whole test's
// setup and teardown per iteration.
type fakeTB struct {
	testing.TB
	cleanups []func()
}

func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Helper()           {}
func (f *fakeTB) end() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
	f.cleanups = nil
}

// BenchmarkNew is the per-test cost of isolation: create a schema, migrate a
// client into it, close it and drop the schema.
func BenchmarkNew(b *testing.B) {
	_ = DatabaseURL(b) // start the server outside the timing
	for b.Loop() {
		f := &fakeTB{TB: b}
		c := New(f)
		if _, err := sentinel.Once(context.Background(), c, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			b.Fatal(err)
		}
		f.end()
	}
}

func TestSharedSchemaIsolatesByNamespace(t *testing.T) {
	var schema, ns string
	t.Run("a", func(t *testing.T) {
		c := New(t, SharedSchema())
		c2 := New(t, SharedSchema(), WithConfig(sentinel.Config{Namespace: "billing"}))
		schema, ns = c.Config().Schema, c.Config().Namespace
		if schema == Schema(t) || c2.Config().Schema != schema || ns == c2.Config().Namespace ||
			!strings.HasPrefix(c2.Config().Namespace, "billing-") {
			t.Fatalf("shared clients: %+v / %+v", c.Config(), c2.Config())
		}
		if _, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("b", func(t *testing.T) {
		c := New(t, SharedSchema())
		if c.Config().Schema != schema || c.Config().Namespace == ns {
			t.Fatalf("second test: %+v", c.Config())
		}
		res, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 2, nil })
		if err != nil || res.Cached || res.Value != 2 {
			t.Fatalf("a key of another test leaked in: %+v, %v", res, err)
		}
		// The first test's rows are gone.
		var n int
		if err := server.sharedPool.QueryRow(ctxT(t), "SELECT count(*) FROM "+pgx.Identifier{schema}.Sanitize()+".executions WHERE namespace = $1", ns).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d rows of the finished test remain (%v)", n, err)
		}
	})
}

// BenchmarkNewShared is the per-test cost with SharedSchema.
func BenchmarkNewShared(b *testing.B) {
	_ = New(b, SharedSchema()) // migrate the shared schema outside the timing
	for b.Loop() {
		f := &fakeTB{TB: b}
		c := New(f, SharedSchema())
		if _, err := sentinel.Once(context.Background(), c, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			b.Fatal(err)
		}
		f.end()
	}
}

// A registered ContainerStarter replaces the docker CLI in step 3 (the
// path sentineltest/containers takes with testcontainers-go).
func TestRegisteredContainerStarterIsUsed(t *testing.T) {
	calls := 0
	RegisterContainerStarter(func(ctx context.Context, logf func(string, ...any)) (string, func(), error) {
		calls++
		return "postgres://from-the-starter", func() {}, nil
	})
	defer RegisterContainerStarter(nil)
	u, stop, err := testdb.Docker(context.Background(), t.Logf)
	if err != nil || u != "postgres://from-the-starter" || calls != 1 {
		t.Fatalf("got %q, %v after %d calls", u, err, calls)
	}
	stop()

	// A starter that finds no engine reports ErrNoContainerEngine, which
	// is what the search checks for.
	RegisterContainerStarter(func(context.Context, func(string, ...any)) (string, func(), error) {
		return "", nil, fmt.Errorf("%w: no socket", ErrNoContainerEngine)
	})
	_, _, err = testdb.Docker(context.Background(), t.Logf)
	if !errors.Is(err, testdb.ErrNoDocker) {
		t.Fatalf("want ErrNoDocker, got %v", err)
	}

	// nil restores the docker CLI.
	RegisterContainerStarter(nil)
	_, stop, err = testdb.Docker(context.Background(), t.Logf)
	if err == nil {
		stop() // a Docker engine is there: the CLI started a container
	} else if strings.Contains(err.Error(), "no socket") {
		t.Fatalf("the CLI should be back: %v", err)
	}
}

// A SharedSchema test's rows are deleted when it ends from every table of
// the shared schema that has a namespace, not only the executions, events
// and leases: a queue it drew a turn on, a result type it registered and
// an election it ran leave nothing behind.
func TestSharedSchemaDeletesEveryNamespacedRow(t *testing.T) {
	var schema, ns string
	t.Run("user", func(t *testing.T) {
		c := New(t, SharedSchema())
		schema, ns = c.Config().Schema, c.Config().Namespace
		ctx := ctxT(t)
		turn, err := c.Turn(ctx, "printer")
		if err != nil {
			t.Fatal(err)
		}
		if err := turn.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sentinel.RegisterResultType[int](ctx, c, "invoice-"); err != nil {
			t.Fatal(err)
		}
		elected := make(chan struct{})
		e, err := c.Elector("billing", sentinel.ElectorOptions{
			OnElected: func(ctx context.Context, term int64) { close(elected); <-ctx.Done() },
		})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx) }()
		select {
		case <-elected:
		case <-ctx.Done():
			t.Fatal("never elected")
		}
		stop()
		<-done
	})
	conn, err := pgx.Connect(ctxT(t), DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctxT(t), `SELECT table_name FROM information_schema.columns
		WHERE table_schema = $1 AND column_name = 'namespace' ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		t.Fatalf("namespaced tables of %s: %v, %v", schema, tables, err)
	}
	for _, table := range tables {
		var n int
		q := "SELECT count(*) FROM " + pgx.Identifier{schema, table}.Sanitize() + " WHERE namespace = $1"
		if err := conn.QueryRow(ctxT(t), q, ns).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d rows of the finished test's namespace %s remain in %s", n, ns, table)
		}
	}
}

// A $SENTINEL_TEST_DATABASE_URL that names no usable database fails the
// test with a message that names the variable, not only pgx's connection
// error: the developer may not know it is set.
func TestUnusableEnvURLIsNamed(t *testing.T) {
	for _, u := range []string{"postgres://postgres@127.0.0.1:1/sentinel?connect_timeout=5", "127.0.0.1:5432"} {
		t.Setenv(EnvURL, u)
		_, _, o, err := start(ctxT(t))
		if err == nil {
			o.close()
			t.Fatalf("%s: started", u)
		}
		if !strings.Contains(err.Error(), "$"+EnvURL) || !strings.Contains(err.Error(), "unset it") {
			t.Errorf("%s: the error does not name $%s and the way out: %v", u, EnvURL, err)
		}
	}
}

// SharedSchema shortens a long configured namespace to make room for its
// suffix at a character boundary: a namespace valid in production (at most
// MaxNamespaceLen bytes of UTF-8) stays valid in the test.
func TestSharedSchemaLongUTF8Namespace(t *testing.T) {
	base := strings.Repeat("é", sentinel.MaxNamespaceLen/2) // 128 bytes, two per rune
	c := New(t, SharedSchema(), WithConfig(sentinel.Config{Namespace: base}))
	ns := c.Config().Namespace
	if len(ns) > sentinel.MaxNamespaceLen || !strings.HasPrefix(base, ns[:strings.LastIndexByte(ns, '-')]) {
		t.Fatalf("namespace %q (%d bytes)", ns, len(ns))
	}
}

// errTB records Errorf instead of failing the test, and runs cleanups on
// demand.
type errTB struct {
	fakeTB
	mu     sync.Mutex
	errors []string
}

func (f *errTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// A test that ends with a transaction of its pool still open (t.Fatal
// before Rollback, a missing defer) is told so, and its schema is still
// dropped: the cleanup neither waits for the transaction's locks nor hangs
// in the pool's Close until go test's timeout.
func TestCleanupWithATransactionLeftOpen(t *testing.T) {
	for _, own := range []bool{false, true} {
		f := &errTB{fakeTB: fakeTB{TB: t}}
		var opts []Option
		if own {
			opts = append(opts, WithPoolConfig(func(*pgxpool.Config) {}))
		}
		p := Pool(f, opts...)
		schema := Schema(f)
		ctx := ctxT(t)
		if _, err := p.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ('o-1')"); err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		go func() { f.end(); close(ended) }()
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			_ = tx.Rollback(context.Background()) // let the cleanup finish
			<-ended
			t.Fatalf("own pool %v: the cleanup hung with a transaction left open", own)
		}
		_ = tx.Rollback(context.Background()) // its connection was terminated
		f.mu.Lock()
		errs := strings.Join(f.errors, "\n")
		f.mu.Unlock()
		if !strings.Contains(errs, "still in use") {
			t.Errorf("own pool %v: the test was not told of the open transaction: %q", own, errs)
		}
		if schemaExists(t, schema) {
			t.Errorf("own pool %v: schema %s left behind", own, schema)
		}
	}
}
