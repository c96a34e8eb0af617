package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An Idempotency-Key whose handler stopped with re-runs left
// (Options.Rerun) is not uncertain: the client's repeat of the request
// runs it again, and `idempotency list` (--json "uncertain": false,
// "rerun_pending": true) and `list --uncertain` leave it out. `idempotency
// inspect` said "uncertain": true with --json and offered to resolve and
// reconcile it, which stops the re-run the application asked for. It now
// agrees with the listings.
func TestIdempotencyInspectOfARerunPendingKey(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, idempotency.ExecutionKey("cus_1", "k-1"), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("idempotency", "list", "--json")
	requireCode(t, r, exitOK)
	var list struct {
		Keys []map[string]any `json:"keys"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Keys, 1, r.stdout)
	require.Equal(t, false, list.Keys[0]["uncertain"], r.stdout)
	require.Equal(t, true, list.Keys[0]["rerun_pending"], r.stdout)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1", "--json")
	requireCode(t, r, exitOK)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rec))
	require.Equal(t, false, rec["uncertain"], r.stdout)
	require.Equal(t, true, rec["rerun_pending"], r.stdout)

	r = e.run("idempotency", "inspect", "k-1", "--scope", "cus_1")
	requireCode(t, r, exitOK)
	require.Empty(t, printedCommands(r.stdout), r.stdout)
	require.Contains(t, r.stdout, "runs it again", r.stdout)
}
