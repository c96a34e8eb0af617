// Package testdb finds or starts a PostgreSQL database for tests and demos.
//
// Typical use, one database per test package:
//
//	func TestMain(m *testing.M) {
//		url, cleanup, err := testdb.URL(context.Background(), log.Printf)
//		if err != nil { log.Fatal(err) }
//		code := m.Run()
//		cleanup()
//		os.Exit(code)
//	}
package testdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// EnvURL is the environment variable that points tests at an existing
// database. Tests never fall back to DATABASE_URL, the application's own
// database: a test helper writes only where it was pointed for tests.
const EnvURL = "SENTINEL_TEST_DATABASE_URL"

// EnvDemoURL is the environment variable DemoURL uses first: a demo is the
// main job of its process and runs against the application's database.
const EnvDemoURL = "DATABASE_URL"

// EnvDockerImage overrides the image used by the Docker fallback.
const EnvDockerImage = "SENTINEL_TEST_POSTGRES_IMAGE"

// DefaultDockerImage is the image used by the Docker fallback.
const DefaultDockerImage = "postgres:16-alpine"

// errNoDocker reports that no Docker engine is reachable.
var errNoDocker = errors.New("no Docker engine reachable")

// URL returns a database URL for tests, and a cleanup function to call
// when done (never nil when err is nil). In order:
//
//  1. $SENTINEL_TEST_DATABASE_URL, if set (cleanup is a no-op); never
//     $DATABASE_URL, which names the application's database;
//  2. else a throwaway cluster from local PostgreSQL server binaries
//     (package pgtemp);
//  3. else, when a Docker engine is reachable, a PostgreSQL container;
//  4. else an error that says how to provide a database.
//
// Tests that stop or restart the server must use pgtemp directly, never a
// database from step 1.
func URL(ctx context.Context, logf func(string, ...any)) (url string, cleanup func(), err error) {
	return defaultSources().url(ctx, logf, EnvURL)
}

// DemoURL is URL for a demo program (examples/...): $DATABASE_URL when set,
// the database the user chose to run it against, else the same throwaway
// cluster or container as URL. Never use it from a test.
func DemoURL(ctx context.Context, logf func(string, ...any)) (url string, cleanup func(), err error) {
	return defaultSources().url(ctx, logf, EnvDemoURL)
}

// sources are the steps of URL, replaceable in tests.
type sources struct {
	getenv     func(string) string
	findBinDir func() (string, error)
	startTemp  func(ctx context.Context, binDir string, logf func(string, ...any)) (string, func(), error)
	docker     func(ctx context.Context, logf func(string, ...any)) (string, func(), error)
}

func defaultSources() sources {
	return sources{
		getenv:     os.Getenv,
		findBinDir: pgtemp.FindBinDir,
		startTemp:  startTemp,
		docker:     startContainer,
	}
}

// Starter starts PostgreSQL somewhere (a container) and returns its URL and
// a function that stops it. Its error matches ErrNoDocker when no container
// engine is reachable.
type Starter func(ctx context.Context, logf func(string, ...any)) (url string, stop func(), err error)

// containerStarter replaces the docker CLI in step 3 of URL when set (see
// SetContainerStarter).
var containerStarter atomic.Pointer[Starter]

// SetContainerStarter makes step 3 of URL (and Docker) use f instead of the
// docker CLI; nil restores the CLI. sentineltest/containers sets
// testcontainers-go's postgres module here.
func SetContainerStarter(f Starter) {
	if f == nil {
		containerStarter.Store(nil)
		return
	}
	containerStarter.Store(&f)
}

// startContainer is step 3: the registered starter, else the docker CLI.
func startContainer(ctx context.Context, logf func(string, ...any)) (string, func(), error) {
	if f := containerStarter.Load(); f != nil {
		return (*f)(ctx, logf)
	}
	return startDocker(ctx, logf)
}

func (s sources) url(ctx context.Context, logf func(string, ...any), env string) (string, func(), error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if u := s.getenv(env); u != "" {
		logf("testdb: using $%s", env)
		return u, func() {}, nil
	}
	if env == EnvURL && s.getenv(EnvDemoURL) != "" {
		logf("testdb: $%s is set but not used: tests use $%s or a throwaway cluster, never the application's database", EnvDemoURL, EnvURL)
	}

	var localErr error
	binDir, err := s.findBinDir()
	if err == nil {
		u, cleanup, err := s.startTemp(ctx, binDir, logf)
		if err == nil {
			return u, cleanup, nil
		}
		localErr = fmt.Errorf("starting a throwaway cluster from %s failed: %w", binDir, err)
		logf("testdb: %v; trying Docker", localErr)
	} else {
		localErr = err
	}

	u, cleanup, dockerErr := s.docker(ctx, logf)
	if dockerErr == nil {
		return u, cleanup, nil
	}
	return "", nil, fmt.Errorf("testdb: no PostgreSQL database for tests. Provide one of:\n"+
		"  - set %s to a database URL, e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable\n"+
		"    (never a shared server for suites that stop or restart it);\n"+
		"  - install the PostgreSQL server binaries, e.g. `apt-get install postgresql` "+
		"(found on $PATH, via `pg_config --bindir`, or in /usr/lib/postgresql/*/bin);\n"+
		"  - or make a Docker engine reachable (image %s, or $%s).\n"+
		"local binaries: %v\ndocker: %v", env, DefaultDockerImage, EnvDockerImage, localErr, dockerErr)
}

func startTemp(ctx context.Context, binDir string, logf func(string, ...any)) (string, func(), error) {
	c, err := pgtemp.Start(ctx, pgtemp.Options{BinDir: binDir, Logf: logf})
	if err != nil {
		return "", nil, err
	}
	return c.URL(), func() {
		if err := c.Close(); err != nil {
			logf("testdb: %v", err)
		}
	}, nil
}

// Docker starts PostgreSQL in a container (step 3 of URL alone), for tests
// of the Docker fallback. The error matches ErrNoDocker when no engine is
// reachable.
func Docker(ctx context.Context, logf func(string, ...any)) (url string, cleanup func(), err error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return startContainer(ctx, logf)
}

// ErrNoDocker reports that no Docker engine is reachable.
var ErrNoDocker = errNoDocker

// startDocker runs PostgreSQL in a container with the docker CLI, when no
// starter is registered.
//
// The library's module does not require testcontainers-go: it would add the
// Docker client and about fifty indirect modules to the module graph of
// every Sentinel user for a last-resort path. The separate module
// sentineltest/containers registers it (SetContainerStarter).
func startDocker(ctx context.Context, logf func(string, ...any)) (string, func(), error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", nil, fmt.Errorf("%w: docker CLI not on $PATH", errNoDocker)
	}
	ictx, cancel := context.WithTimeout(ctx, 15*time.Second)
	out, err := exec.CommandContext(ictx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput()
	cancel()
	if err != nil {
		return "", nil, fmt.Errorf("%w: `docker info`: %v: %s", errNoDocker, err, firstLine(string(out)))
	}

	image := os.Getenv(EnvDockerImage)
	if image == "" {
		image = DefaultDockerImage
	}
	logf("testdb: starting a %s container", image)
	out, err = exec.CommandContext(ctx, "docker", "run", "-d", "--rm",
		"--label", "sentinel-testdb=1",
		"-e", "POSTGRES_HOST_AUTH_METHOD=trust",
		"-e", "POSTGRES_DB=sentinel",
		"-p", "127.0.0.1::5432",
		image,
		"-c", "max_connections=200", "-c", "fsync=off", "-c", "full_page_writes=off",
	).Output()
	if err != nil {
		return "", nil, fmt.Errorf("docker run %s: %v%s", image, err, stderrOf(err))
	}
	id := strings.TrimSpace(string(out))
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(cctx, "docker", "rm", "-f", "-v", id).CombinedOutput(); err != nil {
			logf("testdb: docker rm %s: %v: %s", id, err, out)
		}
	}
	fail := func(err error) (string, func(), error) {
		lctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		logs, _ := exec.CommandContext(lctx, "docker", "logs", "--tail", "30", id).CombinedOutput()
		cancel()
		cleanup()
		return "", nil, fmt.Errorf("%w\n--- container logs ---\n%s", err, logs)
	}

	out, err = exec.CommandContext(ctx, "docker", "port", id, "5432/tcp").Output()
	if err != nil {
		return fail(fmt.Errorf("docker port: %v%s", err, stderrOf(err)))
	}
	port, err := parseDockerPort(string(out))
	if err != nil {
		return fail(err)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/sentinel?sslmode=disable", port)

	// The image's entrypoint runs a temporary server without TCP during
	// initialisation, so a successful TCP connection means the real one.
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(wctx, 3*time.Second)
		err = ping(pctx, url)
		pcancel()
		if err == nil {
			logf("testdb: container %.12s ready at %s", id, url)
			return url, cleanup, nil
		}
		select {
		case <-wctx.Done():
			return fail(fmt.Errorf("container %.12s not ready: %v", id, err))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// parseDockerPort reads the host port from `docker port` output such as
// "127.0.0.1:49153" (one line per binding; IPv6 lines look like "[::1]:49153").
func parseDockerPort(out string) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		line = strings.TrimSpace(line)
		i := strings.LastIndexByte(line, ':')
		if i < 0 {
			continue
		}
		if p, err := strconv.Atoi(line[i+1:]); err == nil && p > 0 && p < 65536 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("cannot parse `docker port` output %q", out)
}

func ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
