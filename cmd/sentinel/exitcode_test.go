package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status exited 0 whether or not anything needed an operator, and a key
// left for a re-run (WithRerun) that no caller came back for paged nobody:
// the runbook told operators to build that alert themselves from --json.
// status --exit-code exits 5 when an execution is uncertain, a result was
// not stored, or a key has been rerun pending for longer than
// --rerun-pending-after, in every namespace unless -n names one.

// attentionOf decodes status --json's "attention".
func attentionOf(t *testing.T, r result) statusAttentionJSON {
	t.Helper()
	var st struct {
		Attention *statusAttentionJSON `json:"attention"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.NotNil(t, st.Attention, r.stdout)
	return *st.Attention
}

func TestStatusExitCodeNothingToReport(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "pay-ok", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctxT(t), e.client, "pay-later", func(context.Context) (int, error) {
		return 0, sentinel.Retryable(errors.New("provider busy"))
	})
	require.Error(t, err)

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "needs an operator")
	r = e.run("status", "--exit-code", "--json")
	requireCode(t, r, exitOK)
	at := attentionOf(t, r)
	require.False(t, at.NeedsOperator)
	require.Empty(t, at.Found)
	require.Equal(t, "15m0s", at.RerunPendingAfter)

	// Without --exit-code, --json is as before: no "attention".
	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, `"attention"`)
}

func TestStatusExitCodeUncertainInAnotherNamespace(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "pay-1")

	requireCode(t, e.run("status"), exitOK) // as before

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stdout, "UNCERTAIN", "the usual output first")
	require.Contains(t, r.stderr, `sentinel: needs an operator (exit 5):`)
	require.Contains(t, r.stderr, `1 uncertain in namespace "payments"`)
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list --uncertain"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "pay-1")

	r = e.run("status", "--exit-code", "--json")
	requireCode(t, r, exitAttention)
	at := attentionOf(t, r)
	require.True(t, at.NeedsOperator)
	require.Len(t, at.Found, 1, r.stdout)
	require.Equal(t, "payments", at.Found[0].Namespace)
	require.Equal(t, attentionUncertain, at.Found[0].Kind)
	require.Equal(t, int64(1), at.Found[0].Count)
	require.Equal(t, e.schema, at.Found[0].Schema)
	require.NotNil(t, at.Found[0].Since)

	// -n sets the check's scope: another namespace's key is named, as
	// without --exit-code, but pages that namespace's check, not this one.
	r = e.run("status", "--exit-code", "-n", "mail")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "uncertain executions in other namespaces too: payments (1)")
	requireCode(t, e.run("status", "--exit-code", "-n", "payments"), exitAttention)
}

func TestStatusExitCodeRerunPendingAge(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	// Rerun pending a moment ago: a caller may still come back.
	r := e.run("status", "--exit-code")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, rerunPendingLabel)

	table := pgx.Identifier{e.schema, "executions"}.Sanitize()
	age := func(set string) {
		t.Helper()
		_, err := admin.Exec(ctxT(t), "UPDATE "+table+" SET "+set+" WHERE key = 'pay-1'")
		require.NoError(t, err)
	}
	// The age is since the lease ended (nothing runs it since), not since
	// the attempt started: a long fn that stopped a moment ago is young.
	age("updated_at = updated_at - interval '1 hour'")
	requireCode(t, e.run("status", "--exit-code"), exitOK)

	age("lease_expires_at = lease_expires_at - interval '20 minutes'")
	r = e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 rerun pending, needs an operator (no caller with WithRerun came back for more than 15m) in namespace "default"`)
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list --rerun-pending"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "pay-1")
	require.Contains(t, p.stdout, "rerun pending, needs an operator: attempt 1 of 3 stopped")

	r = e.run("status", "--exit-code", "--json", "--rerun-pending-after", "10m")
	requireCode(t, r, exitAttention)
	at := attentionOf(t, r)
	require.Len(t, at.Found, 1, r.stdout)
	require.Equal(t, attentionRerunPending, at.Found[0].Kind)
	require.Equal(t, "10m0s", at.RerunPendingAfter)

	requireCode(t, e.run("status", "--exit-code", "--rerun-pending-after", "30m"), exitOK)
	requireCode(t, e.run("status"), exitOK) // without --exit-code, as before
}

// The age is read on the database clock: an operator's laptop an hour
// ahead does not make a key left for a re-run a moment ago page. (Run in
// process, where the local clock can be skewed.)
func TestStatusExitCodeRerunPendingOnTheDatabaseClock(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", func(context.Context) (int, error) {
		return 0, errors.New("provider timed out")
	}, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	t.Cleanup(func() {
		localNow, clockRead, clockOnce, clockSkew = time.Now, nil, sync.Once{}, 0
	})
	localNow = func() time.Time { return time.Now().Add(time.Hour) }
	clockRead, clockOnce, clockSkew = nil, sync.Once{}, 0
	var out, errb strings.Builder
	code := run(ctxT(t), []string{"--database-url", dbURL, "--schema", e.schema, "status", "--exit-code"}, nil, &out, &errb)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
}

func TestStatusExitCodeResultNotStored(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.newClient("billing"), "inv-nan", func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)

	requireCode(t, e.run("status"), exitOK)
	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 completed with the result not stored in namespace "billing"`)
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list --result-lost"), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "inv-nan")

	at := attentionOf(t, e.run("status", "--exit-code", "--json"))
	require.Len(t, at.Found, 1)
	require.Equal(t, attentionResultLost, at.Found[0].Kind)
}

// An operator who names no schema is paged for what needs an operator in
// the other schemas of the database too (an application with a
// Config.Schema of its own), rerun pending keys and results not stored
// included; one who names a schema sets the check's scope to it.
func TestStatusExitCodeOtherSchemas(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	client := func(schema, ns string) *sentinel.Client {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	client("sentinel", "default") // the default schema, nothing in it
	app := client("app_one", "billing")
	_, err := sentinel.Once(ctx, app, "inv-1", func(context.Context) (int, error) {
		return 0, errors.New("provider timed out")
	}, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	requireCode(t, run("status", "--exit-code"), exitOK) // rerun pending a moment ago
	_, err = pool.Exec(ctx, `UPDATE "app_one".executions SET lease_expires_at = lease_expires_at - interval '1 hour', updated_at = updated_at - interval '1 hour'`)
	require.NoError(t, err)
	r := run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 rerun pending, needs an operator (no caller with WithRerun came back for more than 15m) in namespace "billing" of schema "app_one"`)
	p := runPrinted(t, strings.Replace(findCommand(t, r.stderr, "sentinel list --rerun-pending"), "sentinel ", "sentinel --database-url '"+dbu+"' ", 1), "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "inv-1")

	at := attentionOf(t, run("status", "--exit-code", "--json"))
	require.Len(t, at.Found, 1)
	require.Equal(t, "app_one", at.Found[0].Schema)

	// --schema or -n names the check's scope.
	requireCode(t, run("status", "--exit-code", "--schema", "sentinel"), exitOK)
	requireCode(t, run("status", "--exit-code", "-n", "billing"), exitOK)
	requireCode(t, run("status", "--exit-code", "--schema", "app_one"), exitAttention)
}

// A bad threshold exits 2 before connecting: with the database
// unreachable, nothing is read, and no database is named.
func TestStatusExitCodeBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"status", "--exit-code", "--rerun-pending-after", "-5m"},
		{"status", "--exit-code", "--rerun-pending-after", "0s"},
		{"status", "--exit-code", "--rerun-pending-after", "soon"},
		{"status", "--rerun-pending-after", "0s"}, // without --exit-code too (it judges the stale HTTP requests listed)
		{"status", "--reconciling-after", "-1h"},  // without --exit-code too (it judges the keys reconciling named)
		{"status", "--exit-code=maybe"},
	} {
		r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:", "%v", args)
		require.NotContains(t, r.stderr, "database \"none\"", "%v", args)
		require.Empty(t, r.stdout, "%v", args)
	}
	r := runBin(t, nil, nil, "status", "--help")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "--exit-code")
	require.Contains(t, r.stdout, "exits 5")
	require.Contains(t, r.stdout, "--rerun-pending-after")
}
