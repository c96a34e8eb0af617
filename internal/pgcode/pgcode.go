// Package pgcode holds the SQLSTATE checks that package sentinel and
// cmd/sentinel must make alike, so that the library's errors and the
// command's own statements (status --exit-code runs SQL of its own) say
// "not migrated" for the same server errors.
package pgcode

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// NotMigrated reports whether err is a server error that means the
// schema has no Sentinel objects, or not those of this version: a
// missing schema or table, or a missing function or column that a later
// migration creates (the statements that meet them are Sentinel's own,
// so an undefined function or column in them is one a migration makes).
func NotMigrated(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P01", // undefined_table
		"3F000", // invalid_schema_name
		"42883", // undefined_function
		"42703": // undefined_column
		return true
	}
	return false
}
