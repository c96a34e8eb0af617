package main

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status tells keys handed back (claimed, no live lease: nothing runs
// them, the next caller does) from claimed keys in progress, but its
// --json did not: both were {"state": "claimed"} with the same flags, two
// rows a script could not tell apart. Each count now carries
// "handed_back", as idempotency list's keys do.
func TestStatusJSONTellsHandedBackFromInProgress(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, k := range []string{"back-1", "live-1"} {
		_, err := sentinel.Once(ctxT(t), e.client, k, func(context.Context) (int, error) {
			return 0, sentinel.Retryable(errors.New("busy"))
		})
		require.Error(t, err)
	}
	// live-1 claimed again, its lease alive: in progress.
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = pg_catalog.clock_timestamp() + interval '1 hour' WHERE key = 'live-1'")
	require.NoError(t, err)

	text := e.run("status")
	requireCode(t, text, exitOK)
	require.Contains(t, text.stdout, handedBackLabel)
	require.Contains(t, text.stdout, "claimed (in progress)")

	r := e.run("status", "--json")
	requireCode(t, r, exitOK)
	var st struct {
		Counts []map[string]any `json:"counts"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Counts, 2, r.stdout)
	got := map[any]float64{}
	for _, c := range st.Counts {
		require.Equal(t, "claimed", c["state"], r.stdout)
		require.Contains(t, c, "handed_back", r.stdout)
		got[c["handed_back"]] += c["count"].(float64)
	}
	require.Equal(t, map[any]float64{true: 1, false: 1}, got, r.stdout)
}
