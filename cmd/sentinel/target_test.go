package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// status and changing commands say where they look; migrate refuses a
// database that came from libpq's defaults without a terminal to confirm.
func TestCommandsNameTheirTarget(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cfg, err := pgconn.ParseConfig(dbURL)
	require.NoError(t, err)
	where := fmt.Sprintf("database %q on %s:%d as %q, schema %q", cfg.Database, cfg.Host, cfg.Port, cfg.User, e.schema)

	r := e.run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, where+", every namespace (from $DATABASE_URL)")
	r = e.run("status", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, where+`, namespace "payments"`)
	r = e.run("reset", "nothing", "--yes")
	require.Contains(t, r.stderr, where)
	r = e.run("migrate")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, where)
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "database")
	// The other lists too (docs/operating.md): an operator who reads "no
	// leases" knows where they were looked for.
	for _, list := range [][]string{{"leases"}, {"elections"}, {"queue", "status"}} {
		r = e.run(list...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stderr, where+`, namespace "default"`, "sentinel %s", strings.Join(list, " "))
	}

	// Nothing names a database: migrate refuses without --yes and touches
	// nothing (it does not even connect).
	r = runBin(t, nil, strings.NewReader(""), "migrate")
	requireCode(t, r, exitRefused)
	require.Contains(t, r.stderr, "libpq's defaults")
	require.Contains(t, r.stderr, "--yes")
	// PG variables name it: no question.
	r = runBin(t, []string{"PGHOST=" + cfg.Host, fmt.Sprintf("PGPORT=%d", cfg.Port), "PGUSER=" + cfg.User,
		"PGDATABASE=" + cfg.Database, "PGSSLMODE=disable"}, nil, "migrate", "--schema", e.schema)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, "from the PG* environment variables")
}
