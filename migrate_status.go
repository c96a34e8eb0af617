package sentinel

// This file: Client.MigrationStatus: which migrations are applied and which are pending.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// AppliedMigration is a migration recorded in <schema>.schema_migrations.
type AppliedMigration struct {
	Version   int
	Name      string
	AppliedAt time.Time // database clock
}

// MigrationState says which migrations a schema has and which it lacks.
type MigrationState struct {
	Schema  string
	Applied []AppliedMigration // oldest first
	Pending []Migration        // not yet applied, in the order Migrate applies them
	// Unknown lists applied versions this build does not know: the schema
	// was migrated by a newer release.
	Unknown []AppliedMigration
}

// UpToDate reports whether no migration is pending.
func (s MigrationState) UpToDate() bool { return len(s.Pending) == 0 }

// MigrationStatus reports the client's schema's applied and pending
// migrations, without changing anything. A schema that does not exist yet has
// every migration pending. Deploy scripts use it (through `sentinel migrate
// status`) to refuse to start on an unmigrated database.
// A nil ctx is refused (ErrInvalid).
func (c *Client) MigrationStatus(ctx context.Context) (MigrationState, error) {
	if err := checkCtx("Client.MigrationStatus", ctx); err != nil {
		return MigrationState{}, err
	}
	if err := c.checkOpen(); err != nil {
		return MigrationState{}, err
	}
	schema := c.cfg.Schema
	st := MigrationState{Schema: schema}
	table := pgx.Identifier{schema, "schema_migrations"}.Sanitize()
	var exists bool
	if err := c.pool.QueryRow(ctx, "SELECT pg_catalog.to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return st, fmt.Errorf("sentinel: migration status: %w", err)
	}
	applied := map[int]bool{}
	if exists {
		rows, err := c.pool.Query(ctx, "SELECT version, name, applied_at FROM "+table+" ORDER BY version")
		if err != nil {
			return st, fmt.Errorf("sentinel: migration status: %w", err)
		}
		ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AppliedMigration, error) {
			var m AppliedMigration
			err := r.Scan(&m.Version, &m.Name, &m.AppliedAt)
			return m, err
		})
		if err != nil {
			return st, fmt.Errorf("sentinel: migration status: %w", err)
		}
		for _, m := range ms {
			if m.Version > len(migrations) {
				st.Unknown = append(st.Unknown, m)
				continue
			}
			applied[m.Version] = true
			st.Applied = append(st.Applied, m)
		}
	}
	for _, m := range Migrations(schema) {
		if !applied[m.Version] {
			st.Pending = append(st.Pending, m)
		}
	}
	return st, nil
}
