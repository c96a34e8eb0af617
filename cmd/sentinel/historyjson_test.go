package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// history --limit N says, on stderr, that earlier events exist; with
// --json it said nothing anywhere, and the array of N events read as the
// key's whole history. stdout stays the array alone.
func TestHistoryLimitJSONSaysEarlierEventsExist(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "charge-9", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	r := e.run("history", "charge-9", "--limit", "2", "--json")
	requireCode(t, r, exitOK)
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs), r.stdout)
	require.Len(t, evs, 2)
	require.Equal(t, "completed", evs[1].Type)
	require.Contains(t, r.stderr, "earlier events not shown (--limit 2; --limit 0 shows all)")

	r = e.run("history", "charge-9", "--limit", "3", "--json")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "not shown", "3 is all of it")
}
