package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// ownDatabase creates a database of the test's own on the test server,
// dropped with the test, and returns its URL and a pool on it: what a test
// of the other schemas of "the database" must not share.
func ownDatabase(t *testing.T, ctx context.Context) (string, *pgxpool.Pool) {
	t.Helper()
	db := "cli_db_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_")
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.Path = "/" + db
	pool, err := pgxpool.New(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return u.String(), pool
}

// An operator who names no schema, against a database whose application
// keeps Sentinel's tables in a schema of its own (Config.Schema): the
// error says which schemas hold them, with the same command for each,
// ready to run as printed.
func TestUnmigratedSchemaNamesTheSchemasThatAre(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	migrated := func(schema string) *sentinel.Client {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: "billing"})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	c := migrated("app_one")
	_, err := sentinel.Once(ctx, c, "pay-1", func(context.Context) (string, error) { return "ch_1", nil })
	require.NoError(t, err)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}
	// the line of stderr after the one that names the schemas
	printed := func(r result) string {
		lines := strings.Split(r.stderr, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, "Sentinel's tables are in") && i+1 < len(lines) {
				return strings.TrimSpace(lines[i+1])
			}
		}
		t.Fatalf("no schema named in:\n%s", r.stderr)
		return ""
	}

	r := run("inspect", "pay-1", "-n", "billing")
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, `Sentinel's tables are in schema "app_one" of this database; the same command there:`)
	require.Contains(t, r.stderr, "sentinel migrate", "the default schema may still be the one meant")
	// ... but not as the likely fix: the tables are elsewhere.
	require.Contains(t, r.stderr, `Only if schema "sentinel" is meant to be a new, empty installation beside those`)
	require.NotContains(t, r.stderr, "if it is right, create the tables")
	line := printed(r)
	require.Equal(t, "sentinel inspect pay-1 --namespace billing --schema app_one", line)
	r = run(strings.Fields(line)[1:]...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "completed")

	r = run("lock", "nightly", "--", "true")
	requireCode(t, r, exitError)
	line = printed(r)
	require.Equal(t, "sentinel lock nightly --schema app_one -- true", line)
	requireCode(t, run(strings.Fields(line)[1:]...), exitOK)

	// migrate status on the schema with no tables: pending, and where
	// the tables are; migrate creating them says the same first.
	r = run("migrate", "status")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "sentinel migrate\nSentinel's tables are in schema \"app_one\" of this database; the same command there:\n  sentinel migrate status --schema app_one\n")
	r = run("migrate", "--schema", "app_new", "--yes")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `sentinel: note: schema "app_new" has no Sentinel tables yet: migrate creates them.`)
	require.Contains(t, r.stderr, "\n  sentinel migrate --yes --schema app_one\n")
	r = run("migrate", "--schema", "app_new", "--yes")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "note:", "a schema with tables is not new")
	_, err = pool.Exec(ctx, "DROP SCHEMA app_new CASCADE")
	require.NoError(t, err)

	// Two schemas: each with its command; the schema named is left out.
	migrated("app_two")
	r = run("status")
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, `Sentinel's tables are in schemas "app_one", "app_two" of this database; the same command in each:`)
	require.Contains(t, r.stderr, "\n  sentinel status --schema app_one\n  sentinel status --schema app_two\n")
	r = run("status", "--schema", "nope")
	require.Contains(t, r.stderr, "\n  sentinel status --schema app_one\n  sentinel status --schema app_two\n")
	r = run("status", "--schema", "app_two")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "other schemas", "app_one has nothing uncertain")

	// An uncertain key in app_one: status in any other schema says so,
	// with the command that shows it, runnable as printed.
	_, err = sentinel.Once(ctx, c, "pay-2", func(context.Context) (string, error) { return "", errors.New("card network timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	r = run("status", "--schema", "app_two", "-n", "default")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `uncertain executions in other schemas of this database too: "app_one"; every namespace there:`)
	line = strings.TrimSpace(r.stdout[strings.LastIndex(r.stdout, "\n  sentinel "):])
	require.Equal(t, "sentinel status --schema app_one", line)
	r = run(strings.Fields(line)[1:]...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "pay-2")
	r = run("status", "--schema", "app_two", "--json")
	requireCode(t, r, exitOK)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, []string{"app_one"}, st.UncertainElsewhere)
	// list --uncertain says so on stderr, stdout unchanged.
	r = run("list", "--uncertain", "--schema", "app_two", "-n", "billing", "--json")
	requireCode(t, r, exitOK)
	require.JSONEq(t, `{"executions": [], "next": ""}`, r.stdout)
	require.Contains(t, r.stderr, "sentinel: note: uncertain executions in other schemas of this database too: \"app_one\"; the same listing for every namespace there:\n  sentinel list --json --uncertain --schema app_one\n")
	r = run("list", "--uncertain", "--json", "--schema", "app_one")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "pay-2")
	// serve on app_two says so at start, and serves.
	cmd, _, out, stderr := startPiped(t, []string{"DATABASE_URL=" + dbu}, "--schema", "app_two", "serve", "--addr", "127.0.0.1:0", "--read-only")
	first, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(first, "listening on http://127.0.0.1:"), first)
	// stderr is copied from its pipe apart from stdout: wait for it.
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), "\n  sentinel serve --addr 127.0.0.1:0 --read-only --schema app_one\n")
	}, 10*time.Second, 10*time.Millisecond, "stderr: %s", stderr)
	require.Contains(t, stderr.String(), `sentinel: note: keys that need an operator (uncertain, or what status --exit-code pages on) in other schemas of this database too: "app_one"; this page shows only schema "app_two"`)
	// And the page itself says so, to the operator who reads it (the
	// note above went to whoever started serve).
	resp, err := http.Get(strings.TrimSpace(strings.TrimPrefix(first, "listening on ")))
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	require.Contains(t, string(page), `id="uncertain-elsewhere"`, "the page says nothing of app_one's uncertain executions")
	require.Contains(t, string(page), "<code>sentinel status --schema app_one</code>")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)

	// Six: five named, and the rest counted. A schema name is the
	// database's to choose: it is printed escaped.
	for _, s := range []string{"app_3", "app_4", "app_5"} {
		migrated(s)
	}
	odd := pgx.Identifier{"app\x1b[31m"}.Sanitize()
	for _, q := range []string{"CREATE SCHEMA " + odd, "CREATE TABLE " + odd + ".schema_migrations ()",
		"CREATE TABLE " + odd + ".executions ()", "CREATE TABLE " + odd + ".leases ()"} {
		_, err = pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	r = run("leases")
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, `Sentinel's tables are in more than 5 other schemas of this database, among them "app\x1b[31m", "app_3", "app_4", "app_5", "app_one"; the same command in each:`)
	require.NotContains(t, r.stderr, "\x1b", "a control character from the database reached the terminal")
}

// serve on a schema with no tables refuses at once, as the other commands
// do, instead of serving a page of errors; on a schema that lacks later
// migrations it says so on stderr and serves.
func TestServeRefusesAnUnmigratedSchema(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	r := e.run("serve", "--addr", "127.0.0.1:0", "--read-only")
	requireCode(t, r, exitError)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Contains(t, r.stderr, fmt.Sprintf("serve: schema %q is not migrated", e.schema))
	require.Contains(t, r.stderr, "sentinel migrate --schema "+e.schema)

	e.migrate()
	_, err := admin.Exec(ctxT(t), "DELETE FROM "+pgx.Identifier{e.schema, "schema_migrations"}.Sanitize()+
		" WHERE version = (SELECT max(version) FROM "+pgx.Identifier{e.schema, "schema_migrations"}.Sanitize()+")")
	require.NoError(t, err)
	cmd, _, out, stderr := e.start("serve", "--addr", "127.0.0.1:0", "--read-only")
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(line, "listening on http://127.0.0.1:"), line)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "sentinel migrate --schema "+e.schema) },
		10*time.Second, 10*time.Millisecond, "stderr: %s", stderr)
	require.Contains(t, stderr.String(), fmt.Sprintf("warning: schema %q lacks 1 migration(s)", e.schema))
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}

// serve's notes reprint its command line for other schemas (the schema
// not migrated; uncertain work elsewhere): they printed the operator
// token given with --operator-token, a secret, to stderr (and so to the
// service's log). It is left out, as the connection is; the printed serve
// then takes $SENTINEL_OPERATOR_TOKEN.
func TestServeNotesDoNotReprintTheOperatorToken(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	c, err := sentinel.New(pool, &sentinel.Config{Schema: "app_one"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctx))
	token := uuid.NewString() + uuid.NewString()
	r := runBin(t, []string{"DATABASE_URL=" + dbu}, nil, "--schema", "app_two", "serve", "--addr", "127.0.0.1:0", "--operator-token", token)
	requireCode(t, r, exitError)
	require.Contains(t, r.stderr, "sentinel serve --addr 127.0.0.1:0 --schema app_one", r.stderr)
	require.NotContains(t, r.stderr, token, "the operator token reprinted")
}

// serve's pages name the other schemas they could not look in for
// uncertain executions (an older version, no privilege): "No uncertain
// keys" was read as the whole database's while one of them went unread.
func TestServePageNamesSchemasItCouldNotRead(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	c, err := sentinel.New(pool, &sentinel.Config{Schema: "app_one"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctx))
	for _, q := range []string{"CREATE SCHEMA app_old", "CREATE TABLE app_old.schema_migrations ()",
		"CREATE TABLE app_old.executions ()", "CREATE TABLE app_old.leases ()"} {
		_, err = pool.Exec(ctx, q)
		require.NoError(t, err)
	}
	cmd, _, out, stderr := startPiped(t, []string{"DATABASE_URL=" + dbu}, "--schema", "app_one", "serve", "--addr", "127.0.0.1:0", "--read-only")
	first, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	resp, err := http.Get(strings.TrimSpace(strings.TrimPrefix(first, "listening on ")))
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	require.Contains(t, string(page), "Other schemas could not be checked for uncertain executions: schemas &#34;app_old&#34; hold Sentinel&#39;s tables but could not be read",
		"the page did not say schema app_old went unread")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}
