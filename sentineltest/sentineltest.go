// Package sentineltest gives tests a throwaway PostgreSQL database and a
// migrated Sentinel client, cleaned up when the test ends.
//
//	func TestMain(m *testing.M) { sentineltest.Main(m) }
//
//	func TestCharge(t *testing.T) {
//		client := sentineltest.New(t) // migrated, in a schema of this test's own
//		res, err := sentinel.Once(ctx, client, "order-1", charge)
//		...
//	}
//
// # Where the database comes from
//
// The first test that asks for a database finds one, once per test binary:
//
//  1. $SENTINEL_TEST_DATABASE_URL, when set: an existing server (nothing is
//     started; only the test schemas are created and dropped in it). Never
//     $DATABASE_URL: that names the application's database, and a test
//     helper writes only where it was pointed for tests;
//  2. else a private cluster started from local PostgreSQL server binaries
//     (initdb and postgres on $PATH, via pg_config, or in
//     /usr/lib/postgresql/*/bin) in a temporary directory;
//  3. else, when a Docker engine is reachable, a PostgreSQL container
//     (image postgres:16-alpine, or $SENTINEL_TEST_POSTGRES_IMAGE);
//  4. else the test fails with a message saying how to provide one.
//
// A search that fails (no source works, initdb fails, the database
// $SENTINEL_TEST_DATABASE_URL names is down) fails the test that made it,
// and the next test that asks searches afresh: a transient failure costs
// one test, not the binary. After 3 tests in a row failed so, later tests
// fail at once, with a message naming the first error and the last, so
// that a permanent cause does not cost every test another attempt.
//
// Step 3 uses testcontainers-go's postgres module when the test binary
// imports the separate module
// github.com/sentinel-coordination/sentinel/sentineltest/containers:
//
//	import _ "github.com/sentinel-coordination/sentinel/sentineltest/containers"
//
// Without that import it runs the docker CLI. The testcontainers path is a
// module of its own because testcontainers-go brings about fifty modules
// (the Docker client, containerd, ...): a project that never needs it keeps
// them out of its module graph. RegisterContainerStarter plugs in any other
// way to start a container.
//
// # Isolation and cost
//
// Every test (and every subtest) that calls New or Pool gets a schema of its
// own, named sentineltest_<owner>_<created>_<random>: Sentinel's tables live there, and the
// pool's search_path puts the test's own unqualified tables there too. The
// schema is dropped when the test ends. Creating, migrating and dropping a
// schema costs 35 to 70 ms on a loaded 2-core machine (see BenchmarkNew; a
// template database per test costs about 180 ms), so hundreds of tests share
// one server in seconds. With SharedSchema, New isolates by namespace in a
// schema migrated once per binary instead: about 3 ms per test. Tests that
// stop or restart the database must start a server of their own instead.
//
// The test's pool has at most 4 connections (MaxConns; the SharedSchema
// pool 16, for all its tests), so that many parallel tests fit in the
// server's max_connections. A running OnceTx holds one for its fn, and the
// client's heartbeats need one: a test that runs more than 3 transactions
// at once (workers charging concurrently) starves them, its OnceTx calls
// wait for a connection and their leases are lost. Give such a test a
// larger pool (in a schema of its own: WithPoolConfig does not apply to
// SharedSchema):
//
//	client := sentineltest.New(t, sentineltest.WithPoolConfig(func(c *pgxpool.Config) { c.MaxConns = 16 }))
//
// # Schemas a killed test binary left behind
//
// A test binary killed before its cleanups ran (SIGKILL, an OOM kill, a
// test timeout) leaves its schemas in an existing server. The first test of
// every later binary drops them, safely: each binary holds a session
// advisory lock on a connection of its own while it runs and beats every
// 10 seconds (a row of the table sentineltest_owners.owners, which it
// creates), its schemas' names carry that lock's id and their creation time
// (database clock), and a schema is dropped only when its owner is gone by
// both signs (its lock is free and it has not beaten for 2 minutes) and it
// is more than 10 minutes old. A binary whose lock's connection drops
// (pg_terminate_backend, a failover, idle_session_timeout) keeps beating on
// a new connection and takes its lock again, so its schemas are never
// dropped under it. Schemas named sentineltest_<12 hex> by versions before
// 0.3 are never dropped automatically: drop them by hand when no test runs.
// A private cluster (step 2) dies with the binary; the temporary directory
// it leaves is removed by the next private cluster started on the host.
//
// # Goroutines
//
// New, Pool, Schema and DatabaseURL may be called from any goroutine while
// the test runs, at once too (workers a test starts share its schema). On
// failure they call t.Fatalf. On the test's goroutine that ends the test;
// on another goroutine, as testing documents for FailNow, it marks the test
// failed and ends that goroutine only (runtime.Goexit: its deferred calls
// run), while the test's goroutine goes on. A worker should therefore
// signal its end in a defer (defer wg.Done()), or the test may wait for it
// until go test's timeout, which does not print the failure. Simplest: call
// them on the test's goroutine and hand the clients to the workers. Never
// call them once the test has ended (from a goroutine that outlived it):
// what they create then is not cleaned up.
//
// # Lifetime of a started server
//
// With Main in TestMain, a started server lives until the last test of the
// binary has run and is then stopped and deleted. Without Main, the server is
// reference-counted by the tests using it and stopped when the last of them
// ends: nothing leaks either way, but sequential tests may then start a
// server each (about a second apiece), so use Main.
package sentineltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testdb"
)

// EnvURL is the environment variable naming an existing database for tests.
const EnvURL = testdb.EnvURL

// startTimeout bounds finding or starting a server.
const startTimeout = 2 * time.Minute

// opTimeout bounds each setup or cleanup statement.
const opTimeout = 30 * time.Second

// server is the database shared by every test of the binary.
var server struct {
	mu sync.Mutex
	serverState
}

// serverState is what server's mutex guards.
type serverState struct {
	url  string
	stop func() // nil when nothing is running
	// Failed starts since the last successful one: the first error and
	// the last, and how many. A later test tries again until
	// maxStartAttempts have failed in a row.
	startFailures int
	firstErr      error
	lastErr       error
	refs          int  // tests currently using the server
	inMain        bool // Main is running: keep the server until it returns

	// The schema shared by SharedSchema clients, migrated once, and its
	// pool; dropped and closed when the server is released.
	shared     string
	sharedPool *pgxpool.Pool
	// sharedDelete deletes one namespace's rows ($1) from every table of
	// the shared schema that has a namespace column.
	sharedDelete string

	// owner names this binary's schemas and holds the lock that marks
	// them live (see stale.go).
	owner *owner
}

// maxStartAttempts is how many tests of a binary in a row may try to find
// or start a server and fail before later tests are failed at once: a
// transient failure (a port taken, a loaded machine's timeout, a Docker
// engine starting) gets fresh attempts, a permanent one does not cost every
// test of the binary a start that fails the same way.
const maxStartAttempts = 3

// url returns the shared database URL, starting a server when needed, and
// holds a reference to it until t ends.
func url(t testing.TB) string {
	t.Helper()
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.stop == nil {
		if server.startFailures >= maxStartAttempts {
			t.Fatalf("sentineltest: no test database, and no new attempt: %s", startFailuresLocked(false))
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		u, stop, o, err := start(ctx)
		cancel()
		if err != nil {
			server.startFailures++
			if server.firstErr == nil {
				server.firstErr = err
			}
			server.lastErr = err
			t.Fatalf("sentineltest: %s", startFailuresLocked(true))
		}
		server.url, server.stop, server.owner = u, stop, o
		server.startFailures, server.firstErr, server.lastErr = 0, nil, nil
	}
	server.refs++
	t.Cleanup(release)
	return server.url
}

// startFailuresLocked describes the failed starts: how many, whether a
// later test tries again, and the errors (the last only, when this test's
// own attempt just failed; else the first and the last).
func startFailuresLocked(attempted bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "finding or starting the test database failed in %d test(s) of this binary in a row", server.startFailures)
	if server.startFailures >= maxStartAttempts {
		b.WriteString("; no later test of this binary tries again (fix the cause below and run the tests again)")
	} else {
		b.WriteString("; a later test of this binary tries again")
	}
	switch {
	case attempted:
		fmt.Fprintf(&b, ":\n%v", server.lastErr)
	case server.lastErr.Error() == server.firstErr.Error():
		fmt.Fprintf(&b, "; each time:\n%v", server.firstErr)
	default:
		fmt.Fprintf(&b, ".\nThe first error:\n%v\nThe last:\n%v", server.firstErr, server.lastErr)
	}
	return b.String()
}

// start finds or starts the server, becomes an owner in it and drops the
// schemas that binaries now gone left there.
func start(ctx context.Context) (u string, stop func(), o *owner, err error) {
	u, stop, err = testdb.URL(ctx, logf)
	if err != nil {
		return "", nil, nil, err
	}
	if o, err = newOwner(ctx, u); err != nil {
		stop()
		if os.Getenv(EnvURL) != "" {
			// The developer may not know the variable is set (a shell
			// profile, a CI setting): name it, and the way out.
			err = fmt.Errorf("the database $%s names cannot be used (correct it, or unset it to have a "+
				"throwaway cluster started from local PostgreSQL binaries): %w", EnvURL, err)
		}
		return "", nil, nil, err
	}
	dropped, serr := sweepStale(ctx, o.conn, o.id, staleAfter)
	for _, d := range dropped {
		logf("sentineltest: dropped schema %s, left by a test binary that is gone", d)
	}
	if serr != nil {
		logf("sentineltest: removing stale schemas: %v", serr)
	}
	return u, stop, o, nil
}

func release() {
	server.mu.Lock()
	defer server.mu.Unlock()
	server.refs--
	if server.refs == 0 && !server.inMain {
		stopLocked()
	}
}

func stopLocked() {
	if server.sharedPool != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, _ = server.sharedPool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{server.shared}.Sanitize()+" CASCADE")
		cancel()
		server.sharedPool.Close()
		server.shared, server.sharedPool, server.sharedDelete = "", nil, ""
	}
	server.owner.close()
	if server.stop != nil {
		server.stop()
	}
	server.url, server.stop, server.owner = "", nil, nil
}

func logf(format string, args ...any) {
	if testing.Verbose() {
		log.Printf(format, args...)
	}
}

// Main runs the tests of m, stops a server sentineltest started, and exits
// with the tests' status. Call it from TestMain:
//
//	func TestMain(m *testing.M) { sentineltest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for a TestMain that does more after the
// tests: it runs m, stops a server sentineltest started and returns m's exit
// code.
func Run(m *testing.M) int {
	server.mu.Lock()
	server.inMain = true
	server.mu.Unlock()
	defer func() {
		server.mu.Lock()
		defer server.mu.Unlock()
		server.inMain = false
		stopLocked()
	}()
	return m.Run()
}

// ContainerStarter starts PostgreSQL in a container and returns its URL
// and a function that stops and removes it. It returns an error matching
// ErrNoContainerEngine when no container engine is reachable, so the search
// goes on to its final message.
type ContainerStarter func(ctx context.Context, logf func(format string, args ...any)) (url string, stop func(), err error)

// ErrNoContainerEngine is the error a ContainerStarter returns (wrapped)
// when no container engine is reachable.
var ErrNoContainerEngine = testdb.ErrNoDocker

// RegisterContainerStarter makes step 3 of the search for a database (see
// the package documentation) use f instead of the docker CLI. Importing
// github.com/sentinel-coordination/sentinel/sentineltest/containers
// registers testcontainers-go's postgres module this way. Register before
// the first test asks for a database; nil restores the docker CLI.
func RegisterContainerStarter(f ContainerStarter) {
	if f == nil {
		testdb.SetContainerStarter(nil)
		return
	}
	testdb.SetContainerStarter(testdb.Starter(f))
}

// DatabaseURL returns the URL of the test database, shared by every test of
// the binary. Isolate what you create in it (a schema or database of your
// own) or use Pool, which does.
//
// On failure it calls t.Fatalf, which ends the test only when called on
// the test's goroutine: see Goroutines in the package documentation.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	return url(t)
}

// Option adjusts New and Pool. A nil Option is skipped.
type Option func(*options)

// newOptions applies opts, skipping nil ones (an option chosen
// conditionally and left unset), as the sentinel package does.
func newOptions(opts []Option) options {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

type options struct {
	cfg      sentinel.Config
	poolConf []func(*pgxpool.Config)
	shared   bool
}

// SharedSchema makes New isolate the test by namespace instead of by
// schema: the client lives in one schema migrated once for the whole test
// binary, with a Config.Namespace of the test's own (the configured
// namespace, if any, plus a random suffix; every SharedSchema client of
// the test configured with the same namespace gets the same one, so they
// compete for keys as clients sharing a schema do, while a subtest has
// one of its own), and its rows are deleted when
// the test ends, from every table that has a namespace (executions,
// events, leases, queues, elections, result types, waiters). It costs no DDL per test: a few milliseconds
// (BenchmarkNewShared) instead of the tens a migrated schema takes.
// Calls that name another namespace (WithNamespace) leave the test's
// isolation, and so does reading Sentinel's tables directly; use the
// default schema isolation for those.
// WithPoolConfig does not apply: the clients share one pool, whose
// search_path is the shared schema, so a table the test creates through
// Pool (in its own schema) is not found by unqualified names in OnceTx's
// fn; qualify it with Schema(t), or use the default isolation.
func SharedSchema() Option { return func(o *options) { o.shared = true } }

// WithConfig sets the client's configuration. Its Schema is ignored: the
// client always lives in the test's schema.
func WithConfig(cfg sentinel.Config) Option { return func(o *options) { o.cfg = cfg } }

// WithPoolConfig adjusts the configuration of the pool New or Pool creates
// for this call (for example a tracer, or MaxConns). Without it the test's
// shared pool is used. WithPoolConfig(nil) changes nothing.
func WithPoolConfig(f func(*pgxpool.Config)) Option {
	return func(o *options) {
		if f != nil {
			o.poolConf = append(o.poolConf, f)
		}
	}
}

// env is one test's world: a schema and the pool that uses it.
type env struct {
	schema string
	url    string
	pool   *pgxpool.Pool
	leaked atomic.Bool // a WithPoolConfig pool was left with a connection in use
}

var envs struct {
	mu sync.Mutex
	m  map[testing.TB]*envEntry
}

// envEntry serializes the creation of one test's env, so that goroutines
// of one test calling New at once share it.
type envEntry struct {
	mu        sync.Mutex
	env       *env
	abandoned bool // its creation failed, and it left envs
}

// getEnv returns t's environment, creating its schema on first use.
func getEnv(t testing.TB) *env {
	t.Helper()
	for {
		envs.mu.Lock()
		if envs.m == nil {
			envs.m = make(map[testing.TB]*envEntry)
		}
		ent := envs.m[t]
		if ent == nil {
			ent = &envEntry{}
			envs.m[t] = ent
		}
		envs.mu.Unlock()
		if e, ok := ent.get(t); ok {
			return e
		}
	}
}

// get returns ent's env, creating it when it has none. When the creation
// fails (t.Fatalf), ent leaves envs: a failed test is not kept for the
// life of the binary, and a later call (another goroutine of t) makes a
// fresh attempt; get reports false to a caller that waited for such an
// entry, which then takes a new one.
func (ent *envEntry) get(t testing.TB) (*env, bool) {
	t.Helper()
	ent.mu.Lock()
	defer ent.mu.Unlock()
	if ent.env != nil {
		return ent.env, true
	}
	if ent.abandoned {
		return nil, false
	}
	defer func() {
		if ent.env == nil {
			ent.abandoned = true
			envs.mu.Lock()
			if envs.m[t] == ent {
				delete(envs.m, t)
			}
			envs.mu.Unlock()
		}
	}()
	ent.env = newEnv(t)
	return ent.env, true
}

// newEnv creates t's schema and its pool.
func newEnv(t testing.TB) *env {
	t.Helper()
	u := url(t) // its release is registered first, so it runs last
	server.mu.Lock()
	e := &env{schema: server.owner.schemaName("sentineltest_"), url: u}
	server.mu.Unlock()
	p, err := newPool(e, nil)
	if err != nil {
		t.Fatalf("sentineltest: %v", err)
	}
	e.pool = p
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	_, err = p.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{e.schema}.Sanitize())
	cancel()
	if err != nil {
		p.Close()
		t.Fatalf("sentineltest: create schema %s: %v", e.schema, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		free := closePool(t, p)
		if free && !e.leaked.Load() {
			if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("sentineltest: drop schema %s: %v", e.schema, err)
			}
			p.Close()
		} else {
			e.dropAfterLeak(ctx, t)
			if free {
				p.Close()
			}
		}
		envs.mu.Lock()
		delete(envs.m, t)
		envs.mu.Unlock()
	})
	return e
}

// closePool reports whether p can be closed at once: no connection of it
// is still acquired when t ends, or within closeGrace after (a statement
// the test's last step left running, such as one waiting for a lock the
// test released as it returned, or one cut by its ctx whose cancellation
// is still under way, gives its connection back within milliseconds).
// Otherwise (a transaction neither committed nor rolled back, an Acquire
// without Release) pgxpool's Close would wait for it forever, and the
// test binary would hang until go test's timeout with a stack trace that
// does not say why: closePool fails the test saying so and starts the
// Close on a goroutine of its own, which ends once the connection is
// released.
// closeGrace is how long closePool waits for a connection still in use
// when the test ended to be given back.
const closeGrace = 2 * time.Second

func closePool(t testing.TB, p *pgxpool.Pool) bool {
	held := p.Stat().AcquiredConns()
	for deadline := time.Now().Add(closeGrace); held > 0 && time.Now().Before(deadline); held = p.Stat().AcquiredConns() {
		time.Sleep(10 * time.Millisecond)
	}
	if held == 0 {
		return true
	}
	t.Errorf("sentineltest: %d connection(s) of the test's pool still in use when the test ended "+
		"(a transaction neither committed nor rolled back, or an Acquire without Release): "+
		"they are terminated so that the test's schema can be dropped", held)
	go p.Close()
	return false
}

// dropAfterLeak drops e's schema when a connection of the test was left
// in use: it terminates the test's connections still open (whose locks
// would block the drop) and drops the schema on a connection of its own.
func (e *env) dropAfterLeak(ctx context.Context, t testing.TB) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Errorf("sentineltest: drop schema %s: %v", e.schema, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_catalog.pg_backend_pid()`, e.appName()); err != nil {
		t.Errorf("sentineltest: terminate the test's connections: %v", err)
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("sentineltest: drop schema %s: %v", e.schema, err)
	}
}

// appName is the application_name of the test's connections, by which a
// cleanup finds those a test left in use.
func (e *env) appName() string { return "sentineltest " + e.schema }

// newPool opens a pool on e's database whose search_path is e's schema
// first, so unqualified tables a test creates land in it.
func newPool(e *env, mods []func(*pgxpool.Config)) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{e.schema}.Sanitize() + ", public"
	cfg.ConnConfig.RuntimeParams["application_name"] = e.appName()
	cfg.MaxConns = 4 // hundreds of parallel tests must fit in max_connections
	for _, m := range mods {
		m(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool: %w", err)
	}
	return p, nil
}

// Schema returns the name of t's own schema, creating it on first use. New's
// clients keep their tables there (not with SharedSchema, whose clients use
// the binary's shared schema), and Pool's connections create unqualified
// tables there.
//
// On failure it calls t.Fatalf, which ends the test only when called on
// the test's goroutine: see Goroutines in the package documentation.
func Schema(t testing.TB) string {
	t.Helper()
	return getEnv(t).schema
}

// Pool returns a pool on the test database whose search_path starts with t's
// own schema. The schema and everything in it are dropped, and the pool
// closed, when t ends. With WithPoolConfig a new pool is made for this call
// (closed when t ends too); otherwise every call in t returns the same pool,
// of at most 4 connections (see Isolation and cost in the package
// documentation for a test that needs more).
// A connection still in use when t ends (a transaction neither committed
// nor rolled back) fails t saying so, and is terminated so that the schema
// is dropped all the same.
//
// On failure it calls t.Fatalf, which ends the test only when called on
// the test's goroutine: see Goroutines in the package documentation.
func Pool(t testing.TB, opts ...Option) *pgxpool.Pool {
	t.Helper()
	o := newOptions(opts)
	return pool(t, o)
}

func pool(t testing.TB, o options) *pgxpool.Pool {
	t.Helper()
	e := getEnv(t)
	if len(o.poolConf) == 0 {
		return e.pool
	}
	p, err := newPool(e, o.poolConf)
	if err != nil {
		t.Fatalf("sentineltest: %v", err)
	}
	t.Cleanup(func() { // runs before the schema is dropped
		if closePool(t, p) {
			p.Close()
		} else {
			e.leaked.Store(true)
		}
	})
	return p
}

// New returns a Sentinel client in t's own schema, migrated, on Pool(t) (or
// on a pool of its own with WithPoolConfig). It is closed when t ends, before
// the schema is dropped. Several calls in one test give several clients
// (distinct owners, as competing workers would be) sharing the schema
// (with SharedSchema, the test's namespace).
//
// On failure it calls t.Fatalf, which ends the test only when called on
// the test's goroutine: see Goroutines in the package documentation.
func New(t testing.TB, opts ...Option) *sentinel.Client {
	t.Helper()
	o := newOptions(opts)
	var p *pgxpool.Pool
	cfg := o.cfg
	if o.shared {
		var deleteNamespace string
		p, cfg.Schema, deleteNamespace = sharedSchema(t)
		cfg.Namespace = testNamespace(t, p, deleteNamespace, cfg.Namespace) // its cleanup runs after the client's Close
	} else {
		p = pool(t, o)
		cfg.Schema = Schema(t)
	}
	c, err := sentinel.New(p, &cfg)
	if err != nil {
		t.Fatalf("sentineltest: %v", err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.Migrate(ctx); err != nil {
		t.Fatalf("sentineltest: %v", err)
	}
	return c
}

// sharedSchema returns the binary's shared pool and schema, migrating it on
// first use, and holds a reference to the server until t ends.
func sharedSchema(t testing.TB) (p *pgxpool.Pool, schema, deleteNamespace string) {
	t.Helper()
	u := url(t)
	server.mu.Lock()
	defer server.mu.Unlock()
	if server.sharedPool != nil {
		return server.sharedPool, server.shared, server.sharedDelete
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("sentineltest: parse database URL: %v", err)
	}
	cfg.MaxConns = 16
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	p, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("sentineltest: open pool: %v", err)
	}
	schema = server.owner.schemaName("sentineltest_shared_")
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema})
	if err == nil {
		err = c.Migrate(ctx)
		c.Close()
	}
	if err == nil {
		deleteNamespace, err = namespaceDelete(ctx, p, schema)
	}
	if err != nil {
		p.Close()
		t.Fatalf("sentineltest: %v", err)
	}
	server.shared, server.sharedPool, server.sharedDelete = schema, p, deleteNamespace
	return p, schema, deleteNamespace
}

// namespaceDelete returns one statement that deletes the rows of namespace
// $1 from every table of schema with a namespace column (executions,
// leases, queues, elections, result types, waiters...), found in the
// catalog so that a table a later migration adds is not forgotten.
func namespaceDelete(ctx context.Context, p *pgxpool.Pool, schema string) (string, error) {
	rows, err := p.Query(ctx, `SELECT c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attname = 'namespace' AND NOT a.attisdropped
		ORDER BY 1`, schema)
	if err != nil {
		return "", fmt.Errorf("list the shared schema's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("list the shared schema's tables: %w", err)
	}
	if len(tables) == 0 {
		return "", fmt.Errorf("the shared schema %s has no table with a namespace column", schema)
	}
	var q strings.Builder
	for i, table := range tables[:len(tables)-1] {
		if i == 0 {
			q.WriteString("WITH ")
		} else {
			q.WriteString(", ")
		}
		fmt.Fprintf(&q, "d%d AS (DELETE FROM %s WHERE namespace = $1)", i, pgx.Identifier{schema, table}.Sanitize())
	}
	fmt.Fprintf(&q, " DELETE FROM %s WHERE namespace = $1", pgx.Identifier{schema, tables[len(tables)-1]}.Sanitize())
	return q.String(), nil
}

// testNamespaces holds each running test's SharedSchema namespaces, by
// the configured namespace they were made from: every New of one test
// (the workers it starts too) gets the same one, so its clients compete
// for keys as clients sharing a schema do.
var testNamespaces struct {
	mu sync.Mutex
	m  map[nsKey]string
}

type nsKey struct {
	t    testing.TB
	base string
}

// testNamespace returns a namespace of t's own for base (the configured
// namespace), the same for every call in t, whose rows deleteNamespace
// deletes from the shared schema when t ends. The first call registers
// that cleanup, so it runs after the Close of every client of t.
func testNamespace(t testing.TB, p *pgxpool.Pool, deleteNamespace, base string) string {
	k := nsKey{t, base}
	testNamespaces.mu.Lock()
	defer testNamespaces.mu.Unlock()
	if ns, ok := testNamespaces.m[k]; ok {
		return ns
	}
	if testNamespaces.m == nil {
		testNamespaces.m = make(map[nsKey]string)
	}
	if base == "" {
		base = "test"
	}
	if n := sentinel.MaxNamespaceLen - 13; len(base) > n {
		// Cut at a character boundary: half a character is not UTF-8,
		// and New would refuse the namespace.
		for n > 0 && !utf8.RuneStart(base[n]) {
			n--
		}
		base = base[:n]
	}
	ns := base + "-" + randomHex()
	testNamespaces.m[k] = ns
	t.Cleanup(func() {
		testNamespaces.mu.Lock()
		delete(testNamespaces.m, k)
		testNamespaces.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, err := p.Exec(ctx, deleteNamespace, ns)
		if err != nil {
			t.Errorf("sentineltest: delete namespace %s: %v", ns, err)
		}
	})
	return ns
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
