package sentinel

// This file: Migrations: Migrate, MigrateTx, Migrations and MigrationFS (the embedded SQL files, applied under an advisory lock).

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.up.sql
var migrationFiles embed.FS

// Migration is one numbered schema change.
type Migration struct {
	Version int    // 1, 2, 3, ... without gaps
	Name    string // file name, e.g. "001_init.up.sql"
	SQL     string // with the schema placeholder still in it
}

var migrations = loadMigrations()

// loadMigrations reads the embedded files and panics on a gap or a bad
// name: that is a build defect, caught by any test run.
func loadMigrations() []Migration {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !strings.HasSuffix(name, ".up.sql") {
			panic(fmt.Sprintf("sentinel: bad migration file name %q", name))
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", name))
		if err != nil {
			panic(err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i, m := range ms {
		if m.Version != i+1 {
			panic(fmt.Sprintf("sentinel: migration %s out of sequence: want version %d", m.Name, i+1))
		}
	}
	return ms
}

// Migrations returns the schema migrations rendered for the given schema
// name, in order.
func Migrations(schema string) []Migration {
	q := pgx.Identifier{schema}.Sanitize()
	out := make([]Migration, len(migrations))
	for i, m := range migrations {
		m.SQL = strings.ReplaceAll(m.SQL, "{{schema}}", q)
		out[i] = m
	}
	return out
}

// MigrationFS returns the migrations rendered for schema as an fs.FS of
// files named "NNN_name.up.sql" at its root, for users who apply migrations
// with their own tool (goose, golang-migrate, tern). Use either this or
// Client.Migrate for a schema, not both: Migrate records versions in its own
// table.
func MigrationFS(schema string) fs.FS {
	m := fstest.MapFS{}
	for _, mg := range Migrations(schema) {
		m[mg.Name] = &fstest.MapFile{Data: []byte(mg.SQL), Mode: 0o444, ModTime: time.Unix(0, 0)}
	}
	return m
}

// migrateLockID is the advisory lock key that serializes Migrate callers.
const migrateLockID = 0x53454e54494e454c // "SENTINEL"

// Migrate creates or upgrades the client's schema. It is idempotent and safe
// when many processes call it at once: callers serialize on an advisory
// transaction lock, every pending migration runs in one transaction, and
// applied versions are recorded in <schema>.schema_migrations.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Migrate(ctx context.Context) error {
	if err := checkCtx("Client.Migrate", ctx); err != nil {
		return err
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("sentinel: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := MigrateTx(ctx, tx, c.cfg.Schema); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("sentinel: migrate: commit: %w", err)
	}
	return nil
}

// MigrateTx applies pending migrations for schema inside tx, which the
// caller commits. It is Migrate for callers that manage the transaction.
//
// When nothing is pending it only reads the applied version, so a role
// limited to reading and writing Sentinel's tables (docs/operating.md, "Database roles")
// can call it on every start-up; schema changes need a role that may create
// in the database. A nil ctx is refused (ErrInvalid).
func MigrateTx(ctx context.Context, tx pgx.Tx, schema string) error {
	if err := checkCtx("MigrateTx", ctx); err != nil {
		return err
	}
	if tx == nil {
		return invalid("tx", "must not be nil")
	}
	if schema == "" {
		return invalid("schema", "must not be empty (the default schema is %q)", "sentinel")
	}
	if err := (Config{Schema: schema}).WithDefaults().validate(); err != nil {
		return err
	}
	q := pgx.Identifier{schema}.Sanitize()
	latest := migrations[len(migrations)-1].Version
	current, err := appliedVersion(ctx, tx, q)
	if err != nil {
		return err
	}
	if current >= latest {
		return nil
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock($1)", int64(migrateLockID)); err != nil {
		return fmt.Errorf("sentinel: migrate: lock: %w", err)
	}
	stmts := "CREATE SCHEMA IF NOT EXISTS " + q + ";" +
		"CREATE TABLE IF NOT EXISTS " + q + ".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT pg_catalog.now())"
	if _, err := tx.Exec(ctx, stmts); err != nil {
		return fmt.Errorf("sentinel: migrate: %w", err)
	}
	// Read again under the lock: another caller may have migrated meanwhile.
	if current, err = appliedVersion(ctx, tx, q); err != nil {
		return err
	}
	for _, m := range Migrations(schema) {
		if m.Version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("sentinel: migrate: apply %s: %w", m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+q+".schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return fmt.Errorf("sentinel: migrate: record %s: %w", m.Name, err)
		}
	}
	return nil
}

// appliedVersion returns the highest applied migration of the schema whose
// quoted name is q, 0 when it has none, without writing anything.
func appliedVersion(ctx context.Context, q Querier, quoted string) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", quoted+".schema_migrations").Scan(&exists); err != nil {
		return 0, fmt.Errorf("sentinel: migrate: read version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := q.QueryRow(ctx, "SELECT coalesce(pg_catalog.max(version), 0) FROM "+quoted+".schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("sentinel: migrate: read version: %w", err)
	}
	return v, nil
}

// seqLiteral is the fencing-token sequence of the schema whose quoted name
// is quoted, as a regclass literal for pg_catalog.nextval. The name is
// escaped for an E” literal, so any schema name New accepts stays inside
// the literal (quotes, backslashes and all).
func seqLiteral(quoted string) string {
	name := quoted + ".fencing_token"
	name = strings.ReplaceAll(name, `\`, `\\`)
	name = strings.ReplaceAll(name, `'`, `''`)
	return "E'" + name + "'::pg_catalog.regclass"
}
