package sentinel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
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
	ttl := 3 * time.Second
	if d, err := time.ParseDuration(os.Getenv("SENTINEL_CHILD_TTL")); err == nil {
		ttl = d
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: os.Getenv("SENTINEL_CHILD_SCHEMA"), DefaultTTL: ttl})
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	key := os.Getenv("SENTINEL_CHILD_KEY")
	switch mode {
	case "leasewait":
		// Wait for key (registered as a waiter), then hold it until
		// killed; say so if it is ever acquired.
		fmt.Println("WAITING")
		l, err := c.Lease(ctx, key, sentinel.WithWait())
		if err == nil {
			fmt.Println("ACQUIRED", l.Token())
			time.Sleep(time.Hour)
		}
		fmt.Println("ERR", err)
		return 1
	case "adopt":
		// Adopt the lease handed on in SENTINEL_CHILD_HANDLE (JSON), then
		// hold it until killed: this client's heartbeat renews it.
		var h sentinel.LeaseHandle
		if err := json.Unmarshal([]byte(os.Getenv("SENTINEL_CHILD_HANDLE")), &h); err != nil {
			fmt.Println("ERR", err)
			return 1
		}
		l, err := c.AdoptHandle(ctx, h)
		if err == nil {
			fmt.Println("ADOPTED", l.Token())
			<-l.Done()
			err = l.Err()
		}
		fmt.Println("ERR", err)
		return 1
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
	case "charge":
		// Once with a charge through the test's card provider; killed in
		// flight (after the charge, inside fn) or after fn returned,
		// before its outcome is stored.
		var opts []sentinel.Option
		if n, _ := strconv.Atoi(os.Getenv("SENTINEL_CHILD_RERUN")); n > 0 {
			opts = append(opts, sentinel.WithRerun(n))
		}
		dedup := os.Getenv("SENTINEL_CHILD_PROVIDER") == "dedup"
		returned := os.Getenv("SENTINEL_CHILD_WHERE") == "returned"
		if returned {
			sentinel.SetAfterFn(func(string) {
				fmt.Println("INSIDE")
				time.Sleep(time.Hour)
			})
		}
		_, err = sentinel.Once(ctx, c, key, func(ctx context.Context) (string, error) {
			id, err := providerCharge(ctx, pool, c.Config().Schema, key, sentinel.EffectKey(ctx), dedup)
			if err != nil || returned {
				return id, err
			}
			fmt.Println("INSIDE")
			time.Sleep(time.Hour)
			return "unreachable", nil
		}, opts...)
	default:
		return 2
	}
	fmt.Println("ERR", err)
	return 1
}

// providerDDL is the card provider of the crash tests: one row per charge.
// A deduplicating provider (card networks, with an idempotency key) turns
// a repeated request with the same reference into the same charge, and
// counts the request; a plain one (an email or SMS API) makes every
// request a new charge.
const providerDDL = `CREATE TABLE IF NOT EXISTS %s.provider_charges (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, ref text UNIQUE, once_key text NOT NULL,
    requests int NOT NULL DEFAULT 1, attempts int[] NOT NULL DEFAULT '{}')`

// providerCharge charges once_key's payment at the provider, with ref as
// the idempotency reference when dedup, and returns the charge's id.
func providerCharge(ctx context.Context, pool *pgxpool.Pool, schema, onceKey, ref string, dedup bool) (string, error) {
	q := pgx.Identifier{schema}.Sanitize() + ".provider_charges"
	var id int64
	var err error
	attempt := sentinel.Attempt(ctx)
	if dedup {
		err = pool.QueryRow(ctx, `INSERT INTO `+q+` AS p (ref, once_key, attempts) VALUES ($1, $2, ARRAY[$3::int])
			ON CONFLICT (ref) DO UPDATE SET requests = p.requests + 1, attempts = p.attempts || $3::int RETURNING id`,
			ref, onceKey, attempt).Scan(&id)
	} else {
		err = pool.QueryRow(ctx, `INSERT INTO `+q+` (once_key, attempts) VALUES ($1, ARRAY[$2::int]) RETURNING id`,
			onceKey, attempt).Scan(&id)
	}
	return fmt.Sprintf("ch_%d", id), err
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
