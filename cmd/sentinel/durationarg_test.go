package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// durationArg is a duration as a printed command carries it: what an
// operator types (10m, 1h30m), not time.Duration.String's 10m0s, and the
// same duration read back.
func TestDurationArg(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Minute, "10m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{30 * time.Second, "30s"},
		{500 * time.Millisecond, "500ms"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Hour + 30*time.Second, "1h30s"},
		{time.Hour + 500*time.Millisecond, "1h0.5s"},
		{time.Hour + 10*time.Minute + 5*time.Second, "1h10m5s"},
		{100 * time.Hour, "100h"},
		{2 * time.Microsecond, "2µs"},
		{0, "0s"},
		{-15 * time.Minute, "-15m"},
	} {
		got := durationArg(c.d)
		require.Equal(t, c.want, got, "%d", c.d)
		back, err := time.ParseDuration(got)
		require.NoError(t, err)
		require.Equal(t, c.d, back, "%s", got)
	}
}

// A duration flag carried into a printed command (list's next page, the
// listing status --exit-code names for keys reconciling too long) reads
// as the operator typed it: --older-than 1h30m, not 1h30m0s.
func TestPrintedCommandsCarryShortDurations(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	for _, k := range []string{"order-1", "order-2"} {
		e.uncertainKey(pay, k)
	}
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '2 hours'")
	require.NoError(t, err)

	r := e.run("list", "--older-than", "90m", "--limit", "1")
	requireCode(t, r, exitOK)
	line := findCommand(t, r.stderr, "sentinel list")
	require.Contains(t, line, " --older-than 1h30m ")
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "order-2")

	_, err = pay.Reconcile(ctxT(t), "order-1")
	require.NoError(t, err)
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '2 hours' WHERE key = 'order-1'")
	require.NoError(t, err)
	r = e.run("status", "--exit-code", "--reconciling-after", "90m")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 reconciling for more than 1h30m in namespace "payments"`)
	require.Contains(t, r.stderr, "sentinel list --state reconciling --older-than 1h30m -n payments")
}
