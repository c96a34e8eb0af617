package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/sentinel-coordination/sentinel"
)

type migrationJSON struct {
	Version   int     `json:"version"`
	Name      string  `json:"name"`
	AppliedAt *string `json:"applied_at,omitempty"`
}

type migrateStatusJSON struct {
	Schema   string          `json:"schema"`
	UpToDate bool            `json:"up_to_date"`
	Applied  []migrationJSON `json:"applied"`
	Pending  []migrationJSON `json:"pending"`
	Unknown  []migrationJSON `json:"unknown,omitempty"`
}

func (a *app) migrateCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade Sentinel's schema",
		Long: `migrate applies every pending migration to --schema in one transaction.
It is idempotent and safe when many processes run it at once: they
serialize on an advisory lock.

It names the database, host, user and schema it migrates (on stderr).
When nothing chose the database (no --database-url, $DATABASE_URL, PGHOST,
PGDATABASE or PGSERVICE: libpq's defaults, the local socket and a database
named after the user) it asks for confirmation on a terminal, and without
one refuses (exit 4) unless --yes is given.`,
		Example: `  sentinel migrate --database-url postgres://app@db/app
  sentinel migrate --schema sentinel_staging`,
		Args: args(0, 0),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.fromDefaults() && !yes && !isTerminal(a.stdin) {
				return refused("migrate: the database comes from libpq's defaults (no --database-url, $DATABASE_URL, PGHOST, PGDATABASE or PGSERVICE); refused without a terminal to confirm: name the database, or pass --yes")
			}
			return nil
		},
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			if a.fromDefaults() {
				if err := a.confirm(yes, "migrate %s, which comes from libpq's defaults?", a.target); err != nil {
					return err
				}
			}
			before, err := a.client.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			if len(before.Applied) == 0 {
				// Creating the tables: say so when the database has them in
				// another schema, which the application may be using.
				if note := a.schemasElsewhere(cmd.Context(), cmd); note != "" {
					fprintf(a.stderr, "sentinel: note: schema %q has no Sentinel tables yet: migrate creates them.\n", a.schema)
					for _, line := range strings.Split(note, "\n") {
						fprintln(a.stderr, line)
					}
				}
			}
			if err := a.client.Migrate(cmd.Context()); err != nil {
				return err
			}
			after, err := a.client.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				return a.printJSON(a.statusJSON(after))
			}
			applied := len(after.Applied) - len(before.Applied)
			last := 0
			if n := len(after.Applied); n > 0 {
				last = after.Applied[n-1].Version
			}
			if applied == 0 {
				fprintf(a.stdout, "schema %q is up to date at version %d\n", after.Schema, last)
			} else {
				fprintf(a.stdout, "schema %q migrated: %d applied, now at version %d\n", after.Schema, applied, last)
			}
			return nil
		}),
	}
	addYes(cmd, &yes)
	cmd.AddCommand(a.migrateStatusCmd())
	return cmd
}

func (a *app) migrateStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List applied and pending migrations; exit 4 when any is pending",
		Long: `migrate status lists the migrations applied to --schema and those pending,
without changing anything. It exits 0 when the schema is up to date and 4
when migrations are pending, for deploy scripts.`,
		Example: `  sentinel migrate status
  sentinel migrate status --json
  sentinel migrate status || sentinel migrate   # in a deploy script`,
		Args: args(0, 0),
		RunE: a.runE(func(cmd *cobra.Command, args []string) error {
			st, err := a.client.MigrationStatus(cmd.Context())
			if err != nil {
				return err
			}
			if a.jsonOut {
				if err := a.printJSON(a.statusJSON(st)); err != nil {
					return err
				}
			} else {
				w := a.table()
				row(w, "VERSION", "NAME", "STATUS")
				for _, m := range st.Applied {
					row(w, m.Version, m.Name, "applied "+ts(m.AppliedAt))
				}
				for _, m := range st.Pending {
					row(w, m.Version, m.Name, "PENDING")
				}
				for _, m := range st.Unknown {
					row(w, m.Version, m.Name, "applied by a newer release "+ts(m.AppliedAt))
				}
				if err := w.Flush(); err != nil {
					return err
				}
			}
			if !st.UpToDate() {
				elsewhere := ""
				if len(st.Applied) == 0 {
					// A schema with no table: the one meant may be another.
					if e := a.schemasElsewhere(cmd.Context(), cmd); e != "" {
						elsewhere = "\n" + e
					}
				}
				return refused("schema %q has %d pending migration(s); apply them:\n  %s%s", st.Schema, len(st.Pending), a.command("migrate"), elsewhere)
			}
			return nil
		}),
	}
}

func (a *app) statusJSON(st sentinel.MigrationState) migrateStatusJSON {
	out := migrateStatusJSON{Schema: st.Schema, UpToDate: st.UpToDate(),
		Applied: []migrationJSON{}, Pending: []migrationJSON{}}
	for _, m := range st.Applied {
		out.Applied = append(out.Applied, migrationJSON{Version: m.Version, Name: m.Name, AppliedAt: tsJSON(m.AppliedAt)})
	}
	for _, m := range st.Pending {
		out.Pending = append(out.Pending, migrationJSON{Version: m.Version, Name: m.Name})
	}
	for _, m := range st.Unknown {
		out.Unknown = append(out.Unknown, migrationJSON{Version: m.Version, Name: m.Name, AppliedAt: tsJSON(m.AppliedAt)})
	}
	return out
}
