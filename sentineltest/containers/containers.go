// Package containers makes sentineltest start PostgreSQL with
// testcontainers-go's postgres module when the machine has no database URL
// and no local PostgreSQL binaries but a reachable Docker engine. Import it
// for its side effect in a test package:
//
//	import _ "github.com/sentinel-coordination/sentinel/sentineltest/containers"
//
// It is a module of its own so that the Sentinel module does not require
// testcontainers-go (and the Docker client, containerd and the rest behind
// it) of every user: only a project that imports this package gets them.
//
// The image is postgres:16-alpine, or $SENTINEL_TEST_POSTGRES_IMAGE. The
// container is removed when the tests using it end (and by testcontainers'
// reaper if the test binary dies first).
package containers

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// EnvImage overrides the PostgreSQL image.
const EnvImage = "SENTINEL_TEST_POSTGRES_IMAGE"

// DefaultImage is the PostgreSQL image used without $SENTINEL_TEST_POSTGRES_IMAGE.
const DefaultImage = "postgres:16-alpine"

// healthTimeout bounds the check that a Docker engine is reachable.
const healthTimeout = 10 * time.Second

func init() {
	sentineltest.RegisterContainerStarter(Start)
}

// Start starts PostgreSQL in a container with testcontainers-go and returns
// its URL and a function that terminates the container. When no Docker
// engine is reachable it returns, quickly, an error matching
// sentineltest.ErrNoContainerEngine. A nil ctx is refused
// (sentinel.ErrInvalid) before the engine is looked for.
func Start(ctx context.Context, logf func(format string, args ...any)) (url string, stop func(), err error) {
	if ctx == nil {
		return "", nil, &sentinel.InvalidError{Field: "ctx", Reason: "must not be nil in containers.Start (use context.Background())"}
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := engineReachable(ctx); err != nil {
		return "", nil, err
	}
	image := os.Getenv(EnvImage)
	if image == "" {
		image = DefaultImage
	}
	logf("sentineltest/containers: starting %s with testcontainers-go", image)
	c, err := postgres.Run(ctx, image,
		postgres.WithDatabase("sentinel"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		postgres.BasicWaitStrategies(),
	)
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return "", nil, fmt.Errorf("sentineltest/containers: start %s: %w", image, err)
	}
	u, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(c)
		return "", nil, fmt.Errorf("sentineltest/containers: connection string: %w", err)
	}
	logf("sentineltest/containers: PostgreSQL ready at %s", u)
	return u, func() {
		if err := testcontainers.TerminateContainer(c); err != nil {
			logf("sentineltest/containers: terminate: %v", err)
		}
	}, nil
}

// engineReachable asks testcontainers-go's Docker provider for the engine's
// health, bounded by healthTimeout.
func engineReachable(ctx context.Context) error {
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return fmt.Errorf("%w: %v", sentineltest.ErrNoContainerEngine, err)
	}
	defer p.Close()
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if err := p.Health(hctx); err != nil {
		return fmt.Errorf("%w: %v", sentineltest.ErrNoContainerEngine, err)
	}
	return nil
}
