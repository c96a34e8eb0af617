package main

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// When the catalog cannot be read, the look in the other schemas for
// uncertain executions says so: it used to return nothing, so status,
// list --uncertain, idempotency list and the console's pages showed no
// other schema, as if none had uncertain executions. (In-process: a
// failure of the catalog read alone cannot be caused from outside on a
// shared server; a closed pool fails it.)
func TestUncertainInSchemasSaysWhenTheCatalogCannotBeRead(t *testing.T) {
	p, err := pgxpool.New(ctxT(t), dbURL)
	require.NoError(t, err)
	p.Close()
	var stderr bytes.Buffer
	a := &app{pool: p, schema: "sentinel", stderr: &stderr}
	found, unread, more, err := a.uncertainInSchemas(ctxT(t))
	require.ErrorIs(t, err, errSchemasUnread)
	require.Empty(t, found)
	require.Empty(t, unread)
	require.False(t, more)
	a.noteSchemasUnread(err)
	require.Contains(t, stderr.String(), "sentinel: note: the other schemas of this database could not be looked in for uncertain executions (reading the catalog failed): ")

	// Read, it says nothing.
	e := newEnv(t)
	e.migrate()
	live, err := pgxpool.New(ctxT(t), dbURL)
	require.NoError(t, err)
	defer live.Close()
	a = &app{pool: live, schema: e.schema, stderr: &stderr}
	_, _, _, err = a.uncertainInSchemas(ctxT(t))
	require.NoError(t, err)
}
