package sentinel_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
)

const childEnv = "SENTINEL_TEST_CHILD"

// runChild runs the body of a test that needs a real OS process to kill:
// it enters fn, says so on stdout, and waits to be killed.
func runChild(mode string) int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("SENTINEL_CHILD_DB"))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: os.Getenv("SENTINEL_CHILD_SCHEMA"), DefaultTTL: 3 * time.Second})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	key := os.Getenv("SENTINEL_CHILD_KEY")
	switch mode {
	case "once":
		_, err = sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
			fmt.Println("INSIDE")
			time.Sleep(time.Hour)
			return "unreachable", nil
		})
	case "oncetx":
		_, err = sentinel.OnceTx(ctx, c, key, func(ctx context.Context, tx pgx.Tx) (string, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{c.Config().Schema}.Sanitize()+".ledger (key) VALUES ($1)", key); err != nil {
				return "", err
			}
			fmt.Println("INSIDE")
			time.Sleep(time.Hour)
			return "unreachable", nil
		})
	default:
		return 2
	}
	fmt.Println("ERR", err)
	return 1
}

// killInside starts a child process running mode on key, waits until it is
// inside fn, and SIGKILLs it.
func killInside(t *testing.T, e *env, mode, key string) {
	t.Helper()
	testmain.KillInside(t, childEnv+"="+mode, "SENTINEL_CHILD_DB="+dbURL,
		"SENTINEL_CHILD_SCHEMA="+e.schema, "SENTINEL_CHILD_KEY="+key)
}

// waitLeaseExpired waits until key's execution lease has expired on the
// database clock.
func waitLeaseExpired(t *testing.T, c *sentinel.Client, key string) *sentinel.Execution {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ex, err := c.Inspect(ctxT(t), key)
		require.NoError(t, err)
		if !ex.LeaseAlive {
			return ex
		}
		require.True(t, time.Now().Before(deadline), "lease never expired")
		time.Sleep(50 * time.Millisecond)
	}
}
