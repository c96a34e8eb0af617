package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
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

// With the database unreachable, status, list --uncertain and idempotency
// list failed with the connection error, after a note that the other
// schemas could not be looked in, which printed the same error again with
// its line breaks and tabs as literal \n\t. The command's own error says
// it, once, each address on a line of its own; the note is left out.
func TestUnreachableDatabaseErrorIsPrintedOnce(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"list", "--uncertain"}, {"idempotency", "list"}} {
		r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, args...)
		requireCode(t, r, exitError)
		require.NotContains(t, r.stderr, `\t`, "%v: %s", args, r.stderr)
		require.NotContains(t, r.stderr, `\n`, "%v: %s", args, r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "failed to connect"), "%v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "\n  127.0.0.1:1 (127.0.0.1): dial error", "%v: %s", args, r.stderr)
	}
}

// The note, when the command goes on (only the catalog read failed), shows
// a cause of several lines as lines, indented, not as \n\t.
func TestSchemasUnreadNoteIsReadable(t *testing.T) {
	var stderr bytes.Buffer
	a := &app{stderr: &stderr}
	a.noteSchemasUnread(fmt.Errorf("%w: %v", errSchemasUnread, errors.New("failed to connect:\n\t127.0.0.1:1: dial error")))
	require.Equal(t, "sentinel: note: "+errSchemasUnread.Error()+": failed to connect:\n  127.0.0.1:1: dial error\n", stderr.String())
}
