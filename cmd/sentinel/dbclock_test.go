package main

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Every time the library returns is on the database clock, but the
// command said how far away it was against the operator's own clock: on a
// laptop an hour behind, a leader whose term expires in 10 s read "in
// 1h00m", and one a minute ahead showed a live lease as expired. The
// command now reads the database clock once and words times against it.
// (The local clock is skewed here by replacing localNow, as the command's
// process cannot skew the database's.)
func TestRelativeTimesFollowTheDatabaseClock(t *testing.T) {
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		localNow, clockRead, clockOnce, clockSkew = time.Now, nil, sync.Once{}, 0
	})
	localNow = func() time.Time { return time.Now().Add(-time.Hour) } // the laptop an hour behind

	var in10s time.Time
	require.NoError(t, pool.QueryRow(ctx, "SELECT pg_catalog.clock_timestamp() + interval '10 seconds'").Scan(&in10s))

	// As before: nothing reads the database clock.
	got := relative(in10s)
	require.True(t, strings.HasPrefix(got, "in 1h00m"), "the local clock alone: %q", got)

	clockOnce, clockRead = sync.Once{}, func() time.Duration { return readClockSkew(pool) }
	got = relative(in10s)
	require.Regexp(t, `^in (9\.\ds|10s)$`, got, "against the database clock")
	require.InDelta(t, float64(time.Hour), float64(clockSkew), float64(time.Second), "the skew read")
	require.True(t, in10s.After(dbNow()), "a time 10 s ahead on the database clock is ahead")
}

// list --older-than and --newer-than counted back from the operator's own
// clock while updated_at is stamped by the database's: on a laptop an hour
// ahead, a key that went uncertain a moment ago was listed as "older than
// 30m" and missing from "newer than 30m". Run in-process, where the local
// clock can be skewed.
func TestListAgesFollowTheDatabaseClock(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "pay-now")
	t.Cleanup(func() {
		localNow, clockRead, clockOnce, clockSkew = time.Now, nil, sync.Once{}, 0
	})
	localNow = func() time.Time { return time.Now().Add(time.Hour) } // the laptop an hour ahead

	list := func(args ...string) string {
		t.Helper()
		clockRead, clockOnce, clockSkew = nil, sync.Once{}, 0
		var out, errb strings.Builder
		code := run(ctxT(t), append([]string{"--database-url", dbURL, "--schema", e.schema, "list"}, args...), nil, &out, &errb)
		require.Equal(t, 0, code, "list %v: %s", args, errb.String())
		return out.String()
	}
	require.NotContains(t, list("--older-than", "30m"), "pay-now", "a key changed a moment ago is not older than 30m")
	require.Contains(t, list("--newer-than", "30m"), "pay-now", "a key changed a moment ago is newer than 30m")
}
