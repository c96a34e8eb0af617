package containers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
	"github.com/sentinel-coordination/sentinel/sentineltest/containers"
)

// startOrSkip starts PostgreSQL with testcontainers-go, or skips the test
// with the reason when no Docker engine is reachable.
func startOrSkip(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	u, stop, err := containers.Start(ctx, t.Logf)
	if errors.Is(err, sentineltest.ErrNoContainerEngine) {
		t.Skipf("no Docker engine reachable (told in %v): %v; start one to run this test", time.Since(begin).Round(time.Millisecond), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return u
}

// The container answers, and Sentinel runs on it.
func TestStartRunsSentinel(t *testing.T) {
	u := startOrSkip(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL %s at %s", v, u)
}

// Without an engine, Start says so fast, with an error the search of
// sentineltest recognises; it never hangs.
func TestNoEngineIsQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	_, stop, err := containers.Start(ctx, t.Logf)
	if err == nil {
		stop()
		t.Skip("a Docker engine is reachable: nothing to check here")
	}
	took := time.Since(begin)
	if !errors.Is(err, sentineltest.ErrNoContainerEngine) {
		t.Fatalf("an engine is reachable but the start failed: %v", err)
	}
	if took > 15*time.Second {
		t.Fatalf("telling there is no engine took %v", took)
	}
	t.Logf("no engine, told in %v: %v", took.Round(time.Millisecond), err)
}

// With the package imported, sentineltest.New finds a database (a URL, the
// local binaries, or this package's container) and gives a migrated client.
func TestSentineltestWithContainersImported(t *testing.T) {
	c := sentineltest.New(t)
	res, err := sentinel.Once(context.Background(), c, "k", func(context.Context) (int, error) { return 7, nil })
	if err != nil || res.Value != 7 {
		t.Fatalf("got %v, %v", res, err)
	}
}

func TestMain(m *testing.M) { sentineltest.Main(m) }
