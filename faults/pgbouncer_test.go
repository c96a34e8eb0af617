package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// Scenario 6: the library through PgBouncer in transaction pooling mode.
// LISTEN needs a session, so clients set DisableListen and waiters fall
// back to re-checking every WaitRecheck. pgx's default query mode caches
// named prepared statements per connection, which transaction pooling
// breaks unless PgBouncer tracks them (>= 1.21 with
// max_prepared_statements > 0); older versions need QueryExecModeExec or
// QueryExecModeSimpleProtocol.

// startBouncer starts pgbouncer in transaction pooling mode in front of
// the cluster on pgPort (pgtemp.StartBouncer), stopped when t ends.
func startBouncer(t testing.TB, pgPort int) *pgtemp.Bouncer {
	t.Helper()
	b, err := pgtemp.StartBouncer(context.Background(), pgPort, 4)
	if errors.Is(err, pgtemp.ErrNoBouncer) {
		t.Skip(err.Error() + "; .ci/run installs it")
	}
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func TestPgBouncer(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 15*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	b := startBouncer(t, cl.Port())
	t.Logf("%s (prepared statements in transaction mode: %v)", b.Version, b.SupportsPrepared)

	modes := map[string]pgx.QueryExecMode{
		"exec":   pgx.QueryExecModeExec,
		"simple": pgx.QueryExecModeSimpleProtocol,
	}
	if b.SupportsPrepared {
		modes["cache_statement"] = pgx.QueryExecModeCacheStatement
	} else {
		t.Run("default mode fails without prepared statement support", func(t *testing.T) {
			// pgx's default mode prepares named statements on whichever
			// server connection a transaction lands on: with PgBouncer <
			// 1.21 in transaction mode they go missing or collide.
			pool := newPool(t, b.URL(), func(c *pgxpool.Config) { c.MaxConns = 8 })
			c := newClient(t, pool, sentinel.Config{DisableListen: true, Owner: "default-mode"})
			var wg sync.WaitGroup
			var mu sync.Mutex
			var prepErrs int
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 25 {
						k := fmt.Sprintf("default-%d-%d", g, i)
						_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return i, nil })
						if err != nil && strings.Contains(err.Error(), "prepared statement") {
							mu.Lock()
							prepErrs++
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%d of 200 calls failed with prepared-statement errors", prepErrs)
			require.Positive(t, prepErrs, "expected pgx's default statement cache to break behind %s in transaction mode", b.Version)
		})
	}

	results := map[string]any{"pgbouncer": b.Version, "pool_mode": "transaction"}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			results[name] = bouncerMode(t, ctx, admin, b, name, mode, p.BouncerKeys)
		})
	}
	report(t, "pgbouncer", results)
}

// bouncerMode runs Once, OnceTx and leases through PgBouncer with one
// query exec mode, and checks them.
func bouncerMode(t *testing.T, ctx context.Context, admin *pgxpool.Pool, b *pgtemp.Bouncer, name string, mode pgx.QueryExecMode, nKeys int) map[string]any {
	var v violations
	const ttl = time.Second
	pools := make([]*pgxpool.Pool, 4)
	clients := make([]*sentinel.Client, 4)
	for i := range pools {
		pools[i] = newPool(t, b.URL(), func(c *pgxpool.Config) {
			c.MaxConns = 3
			c.ConnConfig.DefaultQueryExecMode = mode
		})
		clients[i] = newClient(t, pools[i], sentinel.Config{DefaultTTL: ttl, DisableListen: true,
			WaitRecheck: 100 * time.Millisecond, Owner: fmt.Sprintf("%s-%d", name, i)})
	}
	require.NoError(t, clients[0].Migrate(ctx), "Migrate through PgBouncer")

	// Once: four clients race over the same keys.
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-once-%05d", name, i)
	}
	var mu sync.Mutex
	ran := map[string]int64{}
	var wg sync.WaitGroup
	// The first failure stops the phase: a broken mode fails fast.
	phase, failed := context.WithCancel(ctx)
	defer failed()
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, k := range keys {
				for phase.Err() == nil {
					res, err := sentinel.Once(phase, c, k, effectFn(pools[i], k, c.Owner(), 2*time.Millisecond, nil))
					if errors.Is(err, sentinel.ErrInProgress) {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if err != nil && phase.Err() == nil {
						v.add("Once %s: %v", k, err)
						failed()
					} else if err == nil && !res.Cached {
						mu.Lock()
						ran[k] = res.Token
						mu.Unlock()
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	v.require(t)
	a := auditOnce(t, ctx, admin, clients[0], keys, ran, true, &v)
	if len(a.Uncertain) > 0 {
		v.add("%d keys uncertain without any fault", len(a.Uncertain))
	}
	auditFinal(t, ctx, admin, keys, &v)

	// OnceTx: fn's write commits with the completion, through a
	// transaction-pooled connection.
	txKeys := 50
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range txKeys {
				k := fmt.Sprintf("%s-tx-%03d", name, j)
				for {
					_, err := sentinel.OnceTx(ctx, c, k, func(ctx context.Context, tx pgx.Tx) (int, error) {
						tok, _ := sentinel.TokenFromContext(ctx)
						_, err := tx.Exec(ctx, `INSERT INTO side_effects (key, token, digest, worker) VALUES ($1, $2, $3, $4)`,
							k, tok, digest(k), c.Owner())
						return j, err
					})
					if errors.Is(err, sentinel.ErrInProgress) {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if err != nil {
						v.add("OnceTx %s (client %d): %v", k, i, err)
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	var dupTx, missingTx int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n > 1), $2::int - count(*) FROM (
		SELECT key, count(*) n FROM side_effects WHERE key LIKE $1 GROUP BY key) s`, name+"-tx-%", txKeys).Scan(&dupTx, &missingTx))
	if dupTx != 0 || missingTx != 0 {
		v.add("OnceTx: %d keys written twice, %d never written", dupTx, missingTx)
	}

	// Waiting without LISTEN: a waiter re-checks every WaitRecheck, so it
	// gets a released lease within about that, long before the holder's
	// TTL would have run out.
	const longTTL = 10 * time.Second
	holder, err := clients[0].Lease(ctx, name+"-wait", sentinel.WithTTL(longTTL))
	require.NoError(t, err)
	got := make(chan time.Time, 1)
	go func() {
		l, err := clients[1].Lease(ctx, name+"-wait", sentinel.WithWait(), sentinel.WithTTL(longTTL))
		if err != nil {
			v.add("waiter: %v", err)
			got <- time.Time{}
			return
		}
		got <- time.Now()
		_ = l.Release(ctx)
	}()
	time.Sleep(2 * ttl) // also: heartbeats keep the holder alive through PgBouncer
	if holder.Err() != nil {
		v.add("holder lost its lease through PgBouncer: %v", holder.Err())
	}
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	at := <-got
	wake := at.Sub(released)
	if at.IsZero() || wake > 100*time.Millisecond+400*time.Millisecond {
		v.add("waiter acquired %s after the release, want within WaitRecheck (100ms) + slack", wake)
	}

	// Competing leases, checked like the other scenarios.
	lr := newLeaseRun(admin)
	lctx, stop := context.WithTimeout(ctx, 3*time.Second)
	for i, c := range clients[:3] {
		a := &actor{id: i, client: c, pool: pools[i], keys: []string{name + "-lease"},
			hold:          func() time.Duration { return time.Duration(10+rand.IntN(40)) * time.Millisecond },
			holdUntilDone: func() bool { return false }, acquireWait: 3 * time.Second, writeEvery: 10 * time.Millisecond}
		wg.Add(1)
		go func() { defer wg.Done(); lr.run(lctx, a) }()
	}
	wg.Wait()
	stop()
	lc := lr.check(t, ctx, &v)
	if lc.Grants < 10 {
		v.add("only %d lease grants through PgBouncer in 3s", lc.Grants)
	}
	v.require(t)
	return map[string]any{"once_keys": nKeys, "once_clients": len(clients), "oncetx_keys": txKeys,
		"waiter_wake_ms": wake.Milliseconds(), "lease_ops_checked": lc.Ops, "lease_grants": lc.Grants,
		"porcupine": lc.Result, "violations": v.count()}
}
