package faults

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

var longFlag = flag.Bool("long", false, "run the long fault-injection profile (also: SENTINEL_FAULTS=long)")

// profile sizes every scenario. ci fits a few minutes on 2 cores with -race.
type profile struct {
	Name string

	CrashRounds, CrashWorkers, CrashKeys int
	CrashKills                           int // per round, at most
	PauseTrials                          int
	Restarts                             int
	NetTrials                            int // per fault kind
	BouncerKeys                          int

	ElectionTrials int // per fault kind (election_test.go)
	HandoffRounds  int // per kind of hand-off (handoff_test.go)
}

var (
	ciProfile = profile{
		Name:        "ci",
		CrashRounds: 1, CrashWorkers: 4, CrashKeys: 1000, CrashKills: 60,
		PauseTrials: 6,
		Restarts:    6,
		NetTrials:   3,
		BouncerKeys: 300,

		ElectionTrials: 2,
		HandoffRounds:  40,
	}
	longProfile = profile{
		Name:        "long",
		CrashRounds: 6, CrashWorkers: 8, CrashKeys: 2000, CrashKills: 60,
		PauseTrials: 30,
		Restarts:    20,
		NetTrials:   10,
		BouncerKeys: 2000,

		ElectionTrials: 8,
		HandoffRounds:  300,
	}
)

func prof() profile {
	if *longFlag || os.Getenv("SENTINEL_FAULTS") == "long" {
		return longProfile
	}
	return ciProfile
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(workerEnv); mode != "" {
		os.Exit(runWorker(mode))
	}
	// Never run against a shared server: every test starts its own
	// cluster, and some stop and restart it.
	os.Unsetenv("SENTINEL_TEST_DATABASE_URL")
	flag.Parse()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreCurrent()); err != nil {
			log.Printf("goleak: %v", err)
			code = 1
		}
	}
	os.Exit(code)
}

// ctxT is a test context under a hard timeout.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// startCluster starts a throwaway PostgreSQL cluster for one test.
// track_commit_timestamp lets tests read when a grant committed on the
// database clock.
func startCluster(t testing.TB, settings map[string]string) *pgtemp.Cluster {
	t.Helper()
	s := map[string]string{"track_commit_timestamp": "on"}
	for k, v := range settings {
		s[k] = v
	}
	c, err := pgtemp.Start(context.Background(), pgtemp.Options{Settings: s})
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("closing cluster: %v", err)
		}
	})
	return c
}

// newPool opens a pool on url; mod may adjust its config.
func newPool(t testing.TB, url string, mod func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	if mod != nil {
		mod(cfg)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// newClient returns a client on pool, closed at cleanup.
func newClient(t testing.TB, pool *pgxpool.Pool, cfg sentinel.Config) *sentinel.Client {
	t.Helper()
	c, err := sentinel.New(pool, &cfg)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// setupSchema migrates Sentinel's schema and creates the tables the
// scenarios write their side effects to.
func setupSchema(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	c, err := sentinel.New(pool, nil)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Migrate(ctx))
	_, err = pool.Exec(ctx, testTables)
	require.NoError(t, err)
}

// testTables are plain tables in the test database:
//
//   - side_effects: one row per execution of a Once fn, written in its own
//     autocommit statement inside fn (the "outside world" Sentinel cannot
//     roll back).
//   - guarded_log: writes guarded by VerifyToken in the writer's
//     transaction; the identity column gives their commit order, at their
//     time on the database clock.
//   - fenced: a resource guarded by a fencing-token comparison, the
//     pattern for systems that cannot call VerifyToken.
const testTables = `
CREATE TABLE IF NOT EXISTS side_effects (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key    text   NOT NULL,
    token  bigint NOT NULL,
    digest text   NOT NULL,
    worker text   NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS guarded_log (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key    text   NOT NULL,
    token  bigint NOT NULL,
    writer text   NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS fenced (
    key         text PRIMARY KEY,
    fence_token bigint NOT NULL DEFAULT 0,
    writer      text   NOT NULL DEFAULT '',
    writes      bigint NOT NULL DEFAULT 0
);`

// report logs a scenario's numbers, and appends them as a JSON line to
// $SENTINEL_FAULTS_REPORT when set (docs/reliability.md is written from it).
func report(t testing.TB, scenario string, numbers map[string]any) {
	t.Helper()
	numbers["scenario"] = scenario
	numbers["profile"] = prof().Name
	b, err := json.Marshal(numbers)
	require.NoError(t, err)
	t.Logf("RESULT %s", b)
	if path := os.Getenv("SENTINEL_FAULTS_REPORT"); path != "" {
		reportMu.Lock()
		defer reportMu.Unlock()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = fmt.Fprintf(f, "%s\n", b)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
}

var reportMu sync.Mutex

// violations collects property violations found while a scenario runs, so
// a run reports all of them at once.
type violations struct {
	mu   sync.Mutex
	list []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	v.list = append(v.list, fmt.Sprintf(format, args...))
	v.mu.Unlock()
}

func (v *violations) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.list)
}

// require fails the test listing every violation (the first 30).
func (v *violations) require(t testing.TB) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.list) == 0 {
		return
	}
	shown := v.list
	if len(shown) > 30 {
		shown = shown[:30]
	}
	t.Fatalf("%d violations:\n  %s", len(v.list), strings.Join(shown, "\n  "))
}
