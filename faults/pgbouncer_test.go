package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Scenario 6: the library through PgBouncer in transaction pooling mode.
// LISTEN needs a session, so clients set DisableListen and waiters fall
// back to re-checking every WaitRecheck. pgx's default query mode caches
// named prepared statements per connection, which transaction pooling
// breaks unless PgBouncer tracks them (>= 1.21 with
// max_prepared_statements > 0); older versions need QueryExecModeExec or
// QueryExecModeSimpleProtocol.

// bouncer is a running pgbouncer.
type bouncer struct {
	port             int
	major, minor     int
	version          string
	supportsPrepared bool // >= 1.21: max_prepared_statements
}

func (b *bouncer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/sentinel?sslmode=disable", b.port)
}

func pgbouncerBinary() string {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer"
	}
	return ""
}

// startBouncer starts pgbouncer in transaction pooling mode in front of
// the cluster on pgPort, as the postgres OS user when running as root.
func startBouncer(t testing.TB, pgPort int) *bouncer {
	t.Helper()
	bin := pgbouncerBinary()
	if bin == "" {
		t.Skip("pgbouncer not installed (apt-get install pgbouncer); .ci/run installs it")
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	b := &bouncer{version: strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]}
	m := regexp.MustCompile(`(\d+)\.(\d+)`).FindStringSubmatch(b.version)
	require.NotNil(t, m, "cannot parse %q", b.version)
	b.major, _ = strconv.Atoi(m[1])
	b.minor, _ = strconv.Atoi(m[2])
	b.supportsPrepared = b.major > 1 || b.major == 1 && b.minor >= 21

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b.port = l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	dir := t.TempDir()
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root: pgbouncer must run as the postgres user")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// Let that user reach and own the directory.
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	extra := ""
	if b.supportsPrepared {
		extra = "max_prepared_statements = 200\n"
	}
	ini := fmt.Sprintf(`[databases]
sentinel = host=127.0.0.1 port=%d dbname=sentinel user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = 4
max_client_conn = 500
server_reset_query =
admin_users = postgres
%s`, pgPort, b.port, filepath.Join(dir, "userlist.txt"), extra)
	for name, content := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		if cred != nil {
			require.NoError(t, os.Chown(p, int(cred.Uid), int(cred.Gid)))
		}
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cfg, _ := pgx.ParseConfig(b.url())
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
		}
		cancel()
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("pgbouncer exited: %s", logs.tail(20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgbouncer not ready: %v\n%s", err, logs.tail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return b
}

func TestPgBouncer(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 15*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	b := startBouncer(t, cl.Port())
	t.Logf("%s (prepared statements in transaction mode: %v)", b.version, b.supportsPrepared)

	modes := map[string]pgx.QueryExecMode{
		"exec":   pgx.QueryExecModeExec,
		"simple": pgx.QueryExecModeSimpleProtocol,
	}
	if b.supportsPrepared {
		modes["cache_statement"] = pgx.QueryExecModeCacheStatement
	} else {
		t.Run("default mode fails without prepared statement support", func(t *testing.T) {
			// pgx's default mode prepares named statements on whichever
			// server connection a transaction lands on: with PgBouncer <
			// 1.21 in transaction mode they go missing or collide.
			pool := newPool(t, b.url(), func(c *pgxpool.Config) { c.MaxConns = 8 })
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
			require.Positive(t, prepErrs, "expected pgx's default statement cache to break behind %s in transaction mode", b.version)
		})
	}

	results := map[string]any{"pgbouncer": b.version, "pool_mode": "transaction"}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			results[name] = bouncerMode(t, ctx, admin, b, name, mode, p.BouncerKeys)
		})
	}
	report(t, "pgbouncer", results)
}

// bouncerMode runs Once, OnceTx and leases through PgBouncer with one
// query exec mode, and checks them.
func bouncerMode(t *testing.T, ctx context.Context, admin *pgxpool.Pool, b *bouncer, name string, mode pgx.QueryExecMode, nKeys int) map[string]any {
	var v violations
	const ttl = time.Second
	pools := make([]*pgxpool.Pool, 4)
	clients := make([]*sentinel.Client, 4)
	for i := range pools {
		pools[i] = newPool(t, b.url(), func(c *pgxpool.Config) {
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
