package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
)

// The tests run the real binary, built once into a temporary directory,
// against a real database; each test works in a schema of its own.
var (
	bin   string
	dbURL string
	admin *pgxpool.Pool
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sentinel-cli-test")
	if err != nil {
		log.Fatal(err)
	}
	bin = filepath.Join(dir, "sentinel")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		log.Fatalf("go build: %v\n%s", err, out)
	}
	code := testmain.Run(m, &dbURL, &admin)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one test's schema, with a library client on it.
type env struct {
	t      *testing.T
	schema string
	client *sentinel.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, schema: "cli_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_")}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE")
	})
	e.client = e.newClient("default")
	return e
}

// newClient returns a library client in e's schema (not migrated).
func (e *env) newClient(ns string) *sentinel.Client {
	e.t.Helper()
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(e.t, err)
	e.t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: e.schema, Namespace: ns})
	require.NoError(e.t, err)
	e.t.Cleanup(c.Close)
	return c
}

func (e *env) migrate() {
	e.t.Helper()
	require.NoError(e.t, e.client.Migrate(ctxT(e.t)))
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the binary with DATABASE_URL set and --schema first (global
// flags go before or after the command).
func (e *env) run(args ...string) result {
	e.t.Helper()
	return runBin(e.t, []string{"DATABASE_URL=" + dbURL}, nil, append([]string{"--schema", e.schema}, args...)...)
}

func runBin(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return r
}

// cleanEnv is the environment without any database settings.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func requireCode(t *testing.T, r result, code int) {
	t.Helper()
	require.Equal(t, code, r.code, "exit code; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
}

// uncertainKey leaves key uncertain: fn fails after crossing the boundary.
func (e *env) uncertainKey(c *sentinel.Client, key string) {
	e.t.Helper()
	_, err := sentinel.Once(ctxT(e.t), c, key, func(context.Context) (int, error) {
		return 0, errors.New("the payment provider timed out")
	})
	require.ErrorIs(e.t, err, sentinel.ErrUncertain)
}

// rerunPending leaves each of keys rerun pending in c's namespace: fn
// fails (the work's outcome unknown) at attempt 1 of WithRerun(3).
func (e *env) rerunPending(c *sentinel.Client, keys ...string) {
	e.t.Helper()
	for _, k := range keys {
		_, err := sentinel.Once(ctxT(e.t), c, k, func(context.Context) (int, error) {
			return 0, errors.New("provider timed out")
		}, sentinel.WithRerun(3))
		require.ErrorIs(e.t, err, sentinel.ErrUncertain)
	}
}

// rerunPendingAged leaves each of keys rerun pending (rerunPending), then
// ages every execution of the test's schema by 12 minutes, its lease's end
// and its last change alike: stale by --rerun-pending-after 10m, not yet
// by the default 15m.
func (e *env) rerunPendingAged(c *sentinel.Client, keys ...string) {
	e.t.Helper()
	e.rerunPending(c, keys...)
	_, err := admin.Exec(ctxT(e.t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '12 minutes', updated_at = updated_at - interval '12 minutes'")
	require.NoError(e.t, err)
}

func TestMigrateAndStatus(t *testing.T) {
	e := newEnv(t)
	r := e.run("migrate", "status")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stdout, "PENDING")
	require.Contains(t, r.stderr, "pending migration")

	r = e.run("migrate", "status", "--json")
	requireCode(t, r, exitRefused)
	var st migrateStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.False(t, st.UpToDate)
	require.Len(t, st.Pending, len(sentinel.Migrations(e.schema)))
	require.Empty(t, st.Applied)

	r = e.run("migrate")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "migrated")
	r = e.run("migrate") // idempotent
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "up to date")

	r = e.run("--json", "migrate", "status") // a global flag before the command
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.True(t, st.UpToDate)
	require.Empty(t, st.Pending)
	require.Len(t, st.Applied, len(sentinel.Migrations(e.schema)))
	require.Equal(t, 1, st.Applied[0].Version)
}

// The connection comes from --database-url, else DATABASE_URL, else PG*.
func TestConnectionSources(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cfg, err := pgconn.ParseConfig(dbURL)
	require.NoError(t, err)
	pgEnv := []string{"PGHOST=" + cfg.Host, "PGPORT=" + strconv.Itoa(int(cfg.Port)), "PGUSER=" + cfg.User,
		"PGDATABASE=" + cfg.Database, "PGPASSWORD=" + cfg.Password, "PGSSLMODE=disable"}
	for name, tc := range map[string]struct{ env, args []string }{
		"flag":         {nil, []string{"--database-url", dbURL}},
		"DATABASE_URL": {[]string{"DATABASE_URL=" + dbURL}, nil},
		"PG vars":      {pgEnv, nil},
		"flag wins":    {[]string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none"}, []string{"--database-url", dbURL}},
	} {
		t.Run(name, func(t *testing.T) {
			r := runBin(t, tc.env, nil, append(append([]string{"migrate", "status"}, tc.args...), "--schema", e.schema)...)
			requireCode(t, r, exitOK)
		})
	}
	r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, "migrate", "status")
	requireCode(t, r, exitError)
}

func TestUsageErrorsAndHelp(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-command"},
		{"inspect"},
		{"inspect", "a", "b"},
		{"inspect", "k", "--no-such-flag"},
		{"force-complete", "k"},
		{"prune", "--older-than", "soon"},
	} {
		r := runBin(t, nil, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:")
	}
	// Every command documents itself with examples.
	for _, cmd := range [][]string{{}, {"migrate"}, {"migrate", "status"}, {"inspect"}, {"history"}, {"reconcile"},
		{"force-complete"}, {"reset"}, {"set-result"}, {"prune"}, {"leases"}, {"lock"}} {
		r := runBin(t, nil, nil, append(cmd, "--help")...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, "Examples:", "sentinel %v --help", cmd)
		require.Contains(t, r.stdout, "--json", "sentinel %v --help", cmd)
	}
}

func TestInspectHistoryAndReconcile(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "order-1")
	e.uncertainKey(pay, "order-2")

	// Not found: exit 3, in the wrong namespace too.
	requireCode(t, e.run("inspect", "order-1"), exitNotFound)
	requireCode(t, e.run("history", "order-1"), exitNotFound)

	r := e.run("inspect", "order-1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "UNCERTAIN")
	require.Contains(t, r.stdout, "sentinel reconcile order-1 -n payments --token")

	r = e.run("inspect", "order-1", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.True(t, ex.Uncertain)
	require.Equal(t, sentinel.StateExecuting, ex.State)
	require.Equal(t, pay.Owner(), ex.Owner)

	r = e.run("history", "order-1", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{"claimed", "started", "failed"}, types)
	r = e.run("history", "order-1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "the payment provider timed out")

	// Destructive commands refuse without --yes when stdin is not a
	// terminal, and write nothing.
	r = e.run("reconcile", "order-1", "-n", "payments")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "--yes")
	got, err := pay.Inspect(ctxT(t), "order-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, got.State)
	require.Equal(t, ex.Token, got.Token)

	// A stale --token is refused (exit 4).
	r = e.run("reconcile", "order-1", "-n", "payments", "--token", strconv.FormatInt(ex.Token+1000, 10), "--yes")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "expected token")

	r = e.run("reconcile", "order-1", "-n", "payments", "--token", strconv.FormatInt(ex.Token, 10),
		"--reason", "checking the PSP", "--operator", "alice@ops", "--yes", "--json")
	requireCode(t, r, exitOK)
	var rec execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	require.Equal(t, sentinel.StateReconciling, rec.State)
	require.Greater(t, rec.Token, ex.Token)
	_, err = sentinel.Once(ctxT(t), pay, "order-1", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, sentinel.ErrReconciling)

	// Reconciling again is the wrong state: exit 4.
	requireCode(t, e.run("reconcile", "order-1", "-n", "payments", "--yes"), exitRefused)

	r = e.run("force-complete", "order-1", "not json", "-n", "payments", "--yes")
	requireCode(t, r, exitUsage)
	r = e.run("force-complete", "order-1", "42", "-n", "payments")
	requireCode(t, r, exitRefused)
	r = e.run("force-complete", "order-1", "42", "-n", "payments", "--token", strconv.FormatInt(rec.Token, 10), "--yes")
	requireCode(t, r, exitOK)
	res, err := sentinel.Once(ctxT(t), pay, "order-1", func(context.Context) (int, error) { return 0, errors.New("must not run") })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, 42, res.Value)
	r = e.run("history", "order-1", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs))
	require.Equal(t, "reconciling", evs[len(evs)-2].Type)
	require.Equal(t, "checking the PSP", evs[len(evs)-2].Metadata["reason"])
	require.True(t, strings.HasPrefix(evs[len(evs)-2].Owner, "alice@ops/"), evs[len(evs)-2].Owner)
	require.Equal(t, "force_completed", evs[len(evs)-1].Type)

	// The other key: the work did not happen, reset it and the next caller runs it.
	requireCode(t, e.run("reset", "order-2", "-n", "payments", "--yes"), exitRefused) // not reconciling yet
	requireCode(t, e.run("reconcile", "order-2", "-n", "payments", "--yes"), exitOK)
	requireCode(t, e.run("reset", "order-2", "-n", "payments"), exitRefused) // no --yes
	requireCode(t, e.run("reset", "order-2", "-n", "payments", "--yes"), exitOK)
	ran := false
	res, err = sentinel.Once(ctxT(t), pay, "order-2", func(context.Context) (int, error) { ran = true; return 7, nil })
	require.NoError(t, err)
	require.True(t, ran)
	require.False(t, res.Cached)

	// A completed key is not uncertain: wrong state.
	requireCode(t, e.run("reconcile", "order-2", "-n", "payments", "--yes"), exitRefused)
	requireCode(t, e.run("reconcile", "nope", "-n", "payments", "--yes"), exitNotFound)
}

// fn returned success after its lease was lost: inspect shows the
// completion_refused evidence with fn's result, however many callers were
// turned away since.
func TestInspectShowsRefusedCompletion(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "late", func(ctx context.Context) (map[string]string, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+300ms
		<-ctx.Done()          // the hard TTL ends the lease while fn works
		// fn finishes after the database expiry too, however late the
		// claim committed on a loaded machine.
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return map[string]string{"charge": "ch_9"}, nil
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	// Callers turned away since (Config.RecordRejections) do not hide it:
	// inspect reads the key's last run.
	e.rejectMany(500)

	r := e.run("inspect", "late")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "evidence: fn returned success")
	require.Contains(t, r.stdout, `fn's result: {"charge":"ch_9"}`)
	r = e.run("inspect", "late", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	require.True(t, ex.Uncertain)
	require.NotNil(t, ex.CompletionRefused)
	require.Equal(t, map[string]any{"charge": "ch_9"}, ex.CompletionRefused.Metadata["result"])
}

func TestSetResult(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	// fn succeeds but its result cannot be encoded: completed, no result.
	_, err := sentinel.Once(ctxT(t), e.client, "report", func(context.Context) (any, error) { return make(chan int), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	r := e.run("inspect", "report")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "not stored")

	requireCode(t, e.run("set-result", "report", "{nope", "--yes"), exitUsage)
	requireCode(t, e.run("set-result", "report", `{"rows":1204}`), exitRefused) // no --yes
	requireCode(t, e.run("set-result", "missing", `1`, "--yes"), exitNotFound)
	requireCode(t, e.run("set-result", "report", `{"rows":1204}`, "--yes"), exitOK)
	res, err := sentinel.Once(ctxT(t), e.client, "report", func(context.Context) (map[string]int, error) { return nil, errors.New("must not run") })
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, map[string]int{"rows": 1204}, res.Value)
	// A result an operator stored may be replaced; one fn stored may not.
	requireCode(t, e.run("set-result", "report", `{"rows":1205}`, "--yes"), exitOK)
	_, err = sentinel.Once(ctxT(t), e.client, "stored-by-fn", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	requireCode(t, e.run("set-result", "stored-by-fn", `2`, "--yes"), exitRefused)
}

func TestPruneNamespaceScoped(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, ns := range []string{"a", "b"} {
		c := e.newClient(ns)
		_, err := sentinel.Once(ctxT(t), c, "k", func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	e.uncertainKey(e.newClient("a"), "stuck")
	// Age everything by two hours, past the minimum retention.
	for _, q := range []string{
		"UPDATE %s.executions SET completed_at = completed_at - interval '2 hours', updated_at = updated_at - interval '2 hours'",
		"UPDATE %s.events SET at = at - interval '2 hours'",
	} {
		_, err := admin.Exec(ctxT(t), fmt.Sprintf(q, pgx.Identifier{e.schema}.Sanitize()))
		require.NoError(t, err)
	}

	requireCode(t, e.run("prune", "--older-than", "1h", "-n", "a"), exitRefused) // no --yes
	requireCode(t, e.run("prune", "-n", "a", "--yes"), exitUsage)                // no --older-than
	requireCode(t, e.run("prune", "--older-than", "1h", "-n", "a", "--all-namespaces", "--yes"), exitUsage)
	r := e.run("prune", "--older-than", "1m", "-n", "a", "--yes") // below sentinel.MinRetention
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "MinRetention")

	r = e.run("prune", "--older-than", "1h", "-n", "a", "--yes", "--json")
	requireCode(t, r, exitOK)
	var out pruneJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, int64(1), out.Executions)
	require.Equal(t, "a", *out.Namespace)
	requireCode(t, e.run("inspect", "k", "-n", "a"), exitNotFound)
	requireCode(t, e.run("inspect", "stuck", "-n", "a"), exitOK) // uncertain keys are never pruned
	requireCode(t, e.run("inspect", "k", "-n", "b"), exitOK)     // other namespaces untouched

	r = e.run("prune", "--older-than", "1h", "--all-namespaces", "--yes")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "every namespace: 1 completed executions, 0 handed-back keys")
	requireCode(t, e.run("inspect", "k", "-n", "b"), exitNotFound)
}

func TestLeases(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	jobs := e.newClient("jobs")
	l, err := jobs.Lease(ctxT(t), "invoice-1", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	defer func() { _ = l.Release(context.Background()) }()
	l2, err := e.newClient("other").Lease(ctxT(t), "invoice-2", sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctxT(t)))

	r := e.run("leases", "-n", "jobs", "--json")
	requireCode(t, r, exitOK)
	var hs []holderJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &hs))
	require.Len(t, hs, 1)
	require.Equal(t, "invoice-1", hs[0].Key)
	require.Equal(t, l.Token(), hs[0].Token)
	require.Equal(t, jobs.Owner(), hs[0].Owner)
	require.True(t, hs[0].Live)

	r = e.run("leases", "invoice-", "--all-namespaces", "--expired", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &hs))
	require.Len(t, hs, 2)
	require.False(t, hs[1].Live) // the released one, in namespace "other"

	r = e.run("leases", "-n", "jobs")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "invoice-1")
	require.Contains(t, r.stdout, strconv.FormatInt(l.Token(), 10))
}

// startLock starts `sentinel lock` with its stdin and stdout as pipes.
func (e *env) startLock(args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, *syncBuffer) {
	e.t.Helper()
	return e.start(append([]string{"lock"}, args...)...)
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// start starts the binary with its stdin and stdout as pipes.
func (e *env) start(args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, *syncBuffer) {
	e.t.Helper()
	return startPiped(e.t, []string{"DATABASE_URL=" + dbURL}, append([]string{"--schema", e.schema}, args...)...)
}

// startPiped starts the binary with env (and no other database settings),
// as start does.
func startPiped(t *testing.T, env []string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Reader, *syncBuffer) {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, stdin, bufio.NewReader(stdout), stderr
}

func exitCodeOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

// readNameToken reads the child's line "NAMESPACE NAME TOKEN", checks the
// first two and returns the token.
func readNameToken(t *testing.T, out *bufio.Reader, stderr *syncBuffer, ns, name string) int64 {
	t.Helper()
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	f := strings.Fields(line)
	require.Len(t, f, 3)
	require.Equal(t, []string{ns, name}, f[:2])
	token, err := strconv.ParseInt(f[2], 10, 64)
	require.NoError(t, err)
	return token
}

func TestLockRunsCommandWithToken(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	// The child prints its lease environment, waits for a line on stdin,
	// and exits 7.
	cmd, stdin, out, stderr := e.startLock("-n", "jobs", "report", "--ttl", "2s", "--",
		"sh", "-c", `echo "$SENTINEL_LEASE_NAMESPACE $SENTINEL_LEASE_KEY $SENTINEL_LEASE_TOKEN"; read line; exit 7`)
	token := readNameToken(t, out, stderr, "jobs", "report")

	// While the child runs the lease is held with that token, and kept
	// alive past its TTL by heartbeats.
	jobs := e.newClient("jobs")
	_, err := jobs.Lease(ctxT(t), "report")
	var held *sentinel.HeldError
	require.ErrorAs(t, err, &held)
	require.Equal(t, token, held.Holder.Token)
	time.Sleep(2500 * time.Millisecond)
	h, err := jobs.Holder(ctxT(t), "report")
	require.NoError(t, err)
	require.Equal(t, token, h.Token)
	_, err = jobs.Lease(ctxT(t), "report")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)

	_, err = io.WriteString(stdin, "go\n")
	require.NoError(t, err)
	require.Equal(t, 7, exitCodeOf(t, cmd), "stderr: %s", stderr)

	// Released on exit: the key is free at once.
	l, err := jobs.Lease(ctxT(t), "report")
	require.NoError(t, err)
	require.Greater(t, l.Token(), token)
	require.NoError(t, l.Release(ctxT(t)))
}

func TestLockLostTerminatesCommand(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.startLock("job", "--ttl", "1500ms", "--kill-after", "5s", "--",
		"sh", "-c", `echo "$SENTINEL_LEASE_TOKEN"; exec sleep 60`)
	_, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	// An operator forces the lease away: the holder learns at its next
	// renewal and must stop the child.
	l, err := e.client.Lease(ctxT(t), "job", sentinel.WithForce(), sentinel.WithTTL(10*time.Second))
	require.NoError(t, err)
	defer func() { _ = l.Release(context.Background()) }()
	start := time.Now()
	code := exitCodeOf(t, cmd)
	// Taken over: the new holder may already run, so no grace: SIGKILL
	// at once, at the next renewal (every TTL/3).
	require.Equal(t, 128+int(syscall.SIGKILL), code, "stderr: %s", stderr)
	require.Less(t, time.Since(start), 1500*time.Millisecond)
	require.Contains(t, stderr.String(), "lost")
}

// SIGTERM sent to lock reaches the command; lock exits with its code and
// releases the lease.
func TestLockPassesSignalsOn(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.startLock("job", "--",
		"sh", "-c", `trap 'exit 9' TERM; echo ready; while :; do sleep 0.05; done`)
	_, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 9, exitCodeOf(t, cmd), "stderr: %s", stderr)
	_, err = e.client.Holder(ctxT(t), "job")
	require.ErrorIs(t, err, sentinel.ErrNotFound)
}

func TestLockWithoutCommandHoldsUntilInterrupted(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.startLock("maintenance", "--json")
	line, err := out.ReadString('}')
	require.NoError(t, err, "stderr: %s", stderr)
	var got struct {
		Key   string `json:"key"`
		Token int64  `json:"token"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &got))
	require.Equal(t, "maintenance", got.Key)
	h, err := e.client.Holder(ctxT(t), "maintenance")
	require.NoError(t, err)
	require.Equal(t, got.Token, h.Token)

	// --no-wait on a held lease: exit 4 with the holder named.
	r := e.run("lock", "maintenance", "--no-wait", "--", "true")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "held by")
	// --timeout while waiting: exit 4.
	r = e.run("lock", "maintenance", "--timeout", "300ms", "--", "true")
	requireCode(t, r, exitRefused)

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	_, err = e.client.Holder(ctxT(t), "maintenance")
	require.ErrorIs(t, err, sentinel.ErrNotFound)
}

func TestExitCodeMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{nil, exitOK},
		{fmt.Errorf("x: %w", sentinel.ErrNotFound), exitNotFound},
		{&sentinel.ExecutionError{Kind: sentinel.ErrWrongState}, exitRefused},
		{&sentinel.HeldError{}, exitRefused},
		{&sentinel.InvalidError{Field: "key"}, exitUsage},
		{errors.New("boom"), exitError},
		{refused("no"), exitRefused},
		{&codeError{code: 9}, 9},
	} {
		require.Equal(t, tc.code, exitCode(tc.err), "%v", tc.err)
	}
}

// The library's prefix repeated by a wrapped error goes; inside a quoted
// name it stays.
func TestInnerPrefixes(t *testing.T) {
	for in, want := range map[string]string{
		`execution "default"/"k": sentinel: not found`:                `execution "default"/"k": not found`,
		`reconcile "a"/"b": no such execution: sentinel: not found`:   `reconcile "a"/"b": no such execution: not found`,
		`execution "default"/"a\": sentinel: b": sentinel: not found`: `execution "default"/"a\": sentinel: b": not found`,
		`key "x: sentinel: y" stays`:                                  `key "x: sentinel: y" stays`,
		`unbalanced "quote: sentinel: kept`:                           `unbalanced "quote: sentinel: kept`,
		`no prefix at all`:                                            `no prefix at all`,
		`two: sentinel: deep: sentinel: wrapped`:                      `two: deep: wrapped`,
	} {
		require.Equal(t, want, innerPrefixes(in), in)
	}
}
