package console_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
)

var (
	dbURL string
	admin *pgxpool.Pool
)

const childEnv = "SENTINEL_CONSOLE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(testmain.Run(m, &dbURL, &admin))
}

// runChild is a worker process: it enters fn of a Once (with WithRerun
// when SENTINEL_CHILD_RERUN is set), says so, and waits to be killed.
func runChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("SENTINEL_CHILD_DB"))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	ttl := time.Second
	if v := os.Getenv("SENTINEL_CHILD_TTL"); v != "" {
		if ttl, err = time.ParseDuration(v); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: os.Getenv("SENTINEL_CHILD_SCHEMA"), DefaultTTL: ttl})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	var opts []sentinel.Option
	if v := os.Getenv("SENTINEL_CHILD_RERUN"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fmt.Println("ERR", err)
			return 1
		}
		opts = append(opts, sentinel.WithRerun(n))
	}
	_, err = sentinel.Once(ctx, c, os.Getenv("SENTINEL_CHILD_KEY"), func(ctx context.Context) (string, error) {
		fmt.Println("INSIDE")
		time.Sleep(time.Hour)
		return "unreachable", nil
	}, opts...)
	fmt.Println("ERR", err)
	return 1
}

// killWorker runs a worker process on key, waits until it is inside fn
// and SIGKILLs it: the key is left executing, uncertain once its lease
// (1s) expires.
func killWorker(t *testing.T, schema, key string) {
	t.Helper()
	testmain.KillInside(t, childEnv+"=1", "SENTINEL_CHILD_DB="+dbURL,
		"SENTINEL_CHILD_SCHEMA="+schema, "SENTINEL_CHILD_KEY="+key)
}

// newClient returns a migrated client in a schema of the test's own.
func newClient(t *testing.T) (*sentinel.Client, string) {
	t.Helper()
	schema := "t_console_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctxT(t)))
	return c, schema
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// uncertain leaves key executing with its lease ended (fn failed).
func uncertain(t *testing.T, c *sentinel.Client, key string) {
	t.Helper()
	_, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (int, error) { return 0, fmt.Errorf("boom") })
	require.Error(t, err)
}
