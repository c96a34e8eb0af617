package main

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// An uncertain key became uncertain when its lease ended, not when its
// attempt started (updated_at): a long fn renews its lease for an hour
// without touching updated_at. "since" (status and list's SINCE, inspect's
// since:, and "since" in their --json) is the lease's end, as status
// --exit-code ages it; "updated_at" keeps its meaning.
func TestUncertainSinceIsTheLeaseEnd(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "order-1")
	var updated, leaseEnd time.Time
	require.NoError(t, admin.QueryRow(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		` SET updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = 'order-1' RETURNING updated_at, lease_expires_at`).Scan(&updated, &leaseEnd))
	shown := ts(leaseEnd)
	require.NotEqual(t, ts(updated), shown)

	sinceCol := regexp.MustCompile(`(?m)^default\s+order-1\s+UNCERTAIN\s+(\S+ \S+) \(`)
	for _, args := range [][]string{{"status"}, {"list"}, {"list", "--uncertain"}} {
		r := e.run(args...)
		requireCode(t, r, exitOK)
		m := sinceCol.FindStringSubmatch(r.stdout)
		require.NotNil(t, m, "%v:\n%s", args, r.stdout)
		require.Equal(t, shown, m[1], "%v:\n%s", args, r.stdout)
	}

	r := e.run("inspect", "order-1")
	requireCode(t, r, exitOK)
	require.Regexp(t, `(?m)^since:\s+`+regexp.QuoteMeta(shown)+`  \(2\dm\d+s ago\)`, r.stdout)

	var one struct {
		Since     string `json:"since"`
		UpdatedAt string `json:"updated_at"`
		LeaseEnd  string `json:"lease_expires_at"`
	}
	r = e.run("inspect", "order-1", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	require.Equal(t, one.LeaseEnd, one.Since, r.stdout)
	require.Equal(t, *tsJSON(updated), one.UpdatedAt, r.stdout)

	var many struct {
		Executions []struct {
			Since     string `json:"since"`
			UpdatedAt string `json:"updated_at"`
		} `json:"executions"`
	}
	r = e.run("list", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &many))
	require.Len(t, many.Executions, 1)
	require.Equal(t, one.LeaseEnd, many.Executions[0].Since, r.stdout)
	require.Equal(t, one.UpdatedAt, many.Executions[0].UpdatedAt, r.stdout)

	var st struct {
		Uncertain []struct {
			Since string `json:"since"`
		} `json:"uncertain"`
	}
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Uncertain, 1)
	require.Equal(t, one.LeaseEnd, st.Uncertain[0].Since, r.stdout)

	// A completed key: since is when it last changed, as before.
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		` SET state = 'completed', completed_at = updated_at, lease_expires_at = NULL WHERE key = 'order-1'`)
	require.NoError(t, err)
	r = e.run("inspect", "order-1", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &one))
	require.Equal(t, one.UpdatedAt, one.Since, r.stdout)
}

// status's counts table said OLDEST 3h ago for the UNCERTAIN row (the
// attempt's start, updated_at) above an uncertain list whose SINCE for
// the same, only key said 20m ago (the lease's end). OLDEST is now the
// earliest "since" of the row's keys; --json keeps "oldest_updated_at"
// and gains "oldest_since".
func TestStatusOldestIsTheEarliestSince(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "order-1")
	var updated, leaseEnd time.Time
	require.NoError(t, admin.QueryRow(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		` SET updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = 'order-1' RETURNING updated_at, lease_expires_at`).Scan(&updated, &leaseEnd))

	r := e.run("status")
	requireCode(t, r, exitOK)
	m := regexp.MustCompile(`(?m)^default\s+UNCERTAIN\s+1\s+(\S+ \S+) \(`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	require.Equal(t, ts(leaseEnd), m[1], r.stdout)
	require.Regexp(t, `(?m)^default\s+order-1\s+UNCERTAIN\s+`+regexp.QuoteMeta(m[1])+` \(`, r.stdout, "OLDEST and SINCE agree")

	var st struct {
		Counts []struct {
			Uncertain   bool   `json:"uncertain"`
			Oldest      string `json:"oldest_updated_at"`
			OldestSince string `json:"oldest_since"`
		} `json:"counts"`
	}
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Counts, 1)
	require.Equal(t, *tsJSON(updated), st.Counts[0].Oldest, r.stdout)
	require.Equal(t, *tsJSON(leaseEnd), st.Counts[0].OldestSince, r.stdout)
}
