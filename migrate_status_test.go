package sentinel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestMigrationStatus(t *testing.T) {
	e := newEnv(t) // migrated
	ctx := ctxT(t)
	st, err := e.client(nil).MigrationStatus(ctx)
	require.NoError(t, err)
	require.True(t, st.UpToDate())
	require.Len(t, st.Applied, len(sentinel.Migrations(e.schema)))

	// A version this build does not know (a newer release migrated it).
	_, err = admin.Exec(ctx, "INSERT INTO "+e.table("schema_migrations")+" (version, name) VALUES (999, '999_future.up.sql')")
	require.NoError(t, err)
	st, err = e.client(nil).MigrationStatus(ctx)
	require.NoError(t, err)
	require.True(t, st.UpToDate())
	require.Len(t, st.Unknown, 1)
	require.Equal(t, 999, st.Unknown[0].Version)

	// A schema that does not exist has everything pending.
	p := e.pool(nil)
	none, err := sentinel.New(p, &sentinel.Config{Schema: e.schema + "_none"})
	require.NoError(t, err)
	defer none.Close()
	st, err = none.MigrationStatus(ctx)
	require.NoError(t, err)
	require.False(t, st.UpToDate())
	require.Empty(t, st.Applied)
	require.Len(t, st.Pending, len(sentinel.Migrations("x")))
}
