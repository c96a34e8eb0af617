package pgcode

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestNotMigrated(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "42P01"}, true},
		{&pgconn.PgError{Code: "3F000"}, true},
		{&pgconn.PgError{Code: "42883"}, true},
		{fmt.Errorf("claim: %w", &pgconn.PgError{Code: "42703"}), true},
		{&pgconn.PgError{Code: "40001"}, false}, // serialization_failure
		{&pgconn.PgError{Code: "42501"}, false}, // insufficient_privilege: migrated, not granted
		{errors.New("42P01"), false},
		{nil, false},
	} {
		if got := NotMigrated(tc.err); got != tc.want {
			t.Errorf("NotMigrated(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
