package testdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

func fakeEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func failingSources(t *testing.T) sources {
	return sources{
		getenv:     fakeEnv(nil),
		findBinDir: func() (string, error) { return "", errors.New("no binaries here") },
		startTemp: func(context.Context, string, func(string, ...any)) (string, func(), error) {
			t.Fatal("startTemp called without binaries")
			return "", nil, nil
		},
		docker: func(context.Context, func(string, ...any)) (string, func(), error) {
			return "", nil, errNoDocker
		},
	}
}

func TestEnvPrecedence(t *testing.T) {
	s := failingSources(t)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvURL: "postgres://a", "DATABASE_URL": "postgres://b"}, "postgres://a"},
		{map[string]string{EnvURL: "postgres://a"}, "postgres://a"},
	} {
		s.getenv = fakeEnv(tc.env)
		got, cleanup, err := s.url(context.Background(), t.Logf, EnvURL)
		if err != nil || got != tc.want || cleanup == nil {
			t.Fatalf("env %v: got %q, %v (cleanup nil: %v); want %q", tc.env, got, err, cleanup == nil, tc.want)
		}
		cleanup()
	}
}

// Tests never use the application's $DATABASE_URL: without
// $SENTINEL_TEST_DATABASE_URL they get a throwaway cluster. A demo
// (DemoURL) uses $DATABASE_URL.
func TestTestsIgnoreDatabaseURL(t *testing.T) {
	for _, env := range []map[string]string{
		{"DATABASE_URL": "postgres://app@prod/payments"},
		{EnvURL: "", "DATABASE_URL": "postgres://app@prod/payments"},
	} {
		s := failingSources(t)
		s.getenv = fakeEnv(env)
		s.findBinDir = func() (string, error) { return "/opt/pg/bin", nil }
		s.startTemp = func(context.Context, string, func(string, ...any)) (string, func(), error) {
			return "postgres://throwaway", func() {}, nil
		}
		var logged []string
		got, _, err := s.url(context.Background(), func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }, EnvURL)
		if err != nil || got != "postgres://throwaway" {
			t.Fatalf("env %v: got %q, %v; want the throwaway cluster", env, got, err)
		}
		if !strings.Contains(strings.Join(logged, "\n"), "DATABASE_URL is set but not used") {
			t.Errorf("no log line says DATABASE_URL was ignored: %q", logged)
		}
		got, _, err = s.url(context.Background(), t.Logf, EnvDemoURL)
		if err != nil || got != "postgres://app@prod/payments" {
			t.Fatalf("demo: got %q, %v; want $DATABASE_URL", got, err)
		}
	}
}

func TestNothingAvailable(t *testing.T) {
	_, _, err := failingSources(t).url(context.Background(), t.Logf, EnvURL)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, want := range []string{EnvURL, "apt-get install postgresql", "no binaries here", "Docker"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestFallbackToDocker(t *testing.T) {
	s := failingSources(t)
	s.findBinDir = func() (string, error) { return "/opt/pg/bin", nil }
	s.startTemp = func(context.Context, string, func(string, ...any)) (string, func(), error) {
		return "", nil, errors.New("initdb exploded")
	}
	dockerCalled := false
	s.docker = func(context.Context, func(string, ...any)) (string, func(), error) {
		dockerCalled = true
		return "postgres://docker", func() {}, nil
	}
	got, _, err := s.url(context.Background(), t.Logf, EnvURL)
	if err != nil || got != "postgres://docker" || !dockerCalled {
		t.Fatalf("got %q, %v (docker called: %v)", got, err, dockerCalled)
	}

	s.docker = func(context.Context, func(string, ...any)) (string, func(), error) { return "", nil, errNoDocker }
	_, _, err = s.url(context.Background(), t.Logf, EnvURL)
	if err == nil || !strings.Contains(err.Error(), "initdb exploded") {
		t.Fatalf("error should carry the local failure: %v", err)
	}
}

func TestParseDockerPort(t *testing.T) {
	for in, want := range map[string]int{
		"127.0.0.1:49153\n":         49153,
		"0.0.0.0:5433\n[::]:5433\n": 5433,
		"[::1]:40000":               40000,
	} {
		if got, err := parseDockerPort(in); err != nil || got != want {
			t.Errorf("parseDockerPort(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseDockerPort("garbage"); err == nil {
		t.Error("parseDockerPort accepted garbage")
	}
}

// TestURLThrowawayCluster runs the real URL with the environment variables
// cleared, so it never touches a shared server.
func TestURLThrowawayCluster(t *testing.T) {
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	t.Setenv(EnvURL, "")
	t.Setenv("DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, cleanup, err := URL(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		cleanup()
		t.Fatal(err)
	}
	var db string
	err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&db)
	conn.Close(ctx)
	if err != nil || db != "sentinel" {
		cleanup()
		t.Fatalf("current_database() = %q, %v", db, err)
	}
	cleanup()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		conn.Close(ctx)
		t.Fatal("database still reachable after cleanup")
	}
}

func TestDockerCLIMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := startDocker(context.Background(), t.Logf)
	if !errors.Is(err, errNoDocker) {
		t.Fatalf("want errNoDocker, got %v", err)
	}
}
