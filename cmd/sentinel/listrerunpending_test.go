package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// status --exit-code pages on keys rerun pending (executing, lease ended,
// attempts left) for longer than --rerun-pending-after, and printed
// "sentinel list --state executing --older-than D": a list of every
// executing key whose state changed that long ago, uncertain ones and
// live long-running ones with them, so the operator could not tell which
// were paged about. The command printed now is list --rerun-pending,
// which lists the rerun pending keys and nothing else.
func TestListRerunPendingIsWhatStatusPages(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	ctx := ctxT(t)
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	_, err := sentinel.Once(ctx, e.client, "pay-rerun", fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, e.client, "pay-unc", fail)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, e.client, "pay-done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, e.newClient("billing"), "inv-rerun", fail, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	// A live key run WithRerun, running for an hour: executing, attempts
	// left, but its worker holds the lease.
	entered, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, e.client, "pay-live", func(context.Context) (int, error) {
			close(entered)
			<-release
			return 1, nil
		}, sentinel.WithTTL(time.Minute), sentinel.WithRerun(3))
		done <- err
	}()
	<-entered
	defer func() { close(release); require.NoError(t, <-done) }()

	// Every default key changed state an hour ago; the stopped ones'
	// leases ended 20 minutes ago. billing's rerun pending key is fresh.
	table := pgx.Identifier{e.schema, "executions"}.Sanitize()
	_, err = admin.Exec(ctx, "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
		lease_expires_at = CASE WHEN lease_expires_at <= pg_catalog.now() THEN lease_expires_at - interval '20 minutes' ELSE lease_expires_at END
		WHERE namespace = 'default'`)
	require.NoError(t, err)

	r := e.run("status", "--exit-code")
	requireCode(t, r, exitAttention)
	require.Contains(t, r.stderr, `1 rerun pending, needs an operator (no caller with WithRerun came back for more than 15m) in namespace "default"`)
	require.Contains(t, r.stderr, "the ones counted here being those whose lease ended more than 15m ago")
	line := findCommand(t, r.stderr, "sentinel list --rerun-pending")
	require.NotContains(t, line, "--older-than")
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "pay-rerun")
	require.Contains(t, p.stdout, "rerun pending, needs an operator: attempt 1 of 3 stopped")
	for _, k := range []string{"pay-unc", "pay-live", "pay-done", "inv-rerun"} {
		require.NotContains(t, p.stdout, k, "only what was paged about's kind, in its namespace")
	}
	p = runPrinted(t, line+" --json", "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, `"rerunnable": true`)

	// The filter, with the others.
	keys, next := listKeys(t, e, "--rerun-pending")
	require.Equal(t, []string{"billing/inv-rerun", "default/pay-rerun"}, keys)
	require.Empty(t, next)
	keys, _ = listKeys(t, e, "--rerun-pending", "--state", "executing", "-n", "billing")
	require.Equal(t, []string{"billing/inv-rerun"}, keys)
	keys, _ = listKeys(t, e, "--rerun-pending", "pay-")
	require.Equal(t, []string{"default/pay-rerun"}, keys)
	keys, _ = listKeys(t, e, "--rerun-pending", "--older-than", "30m")
	require.Equal(t, []string{"default/pay-rerun"}, keys)
	keys, next = listKeys(t, e, "--rerun-pending", "--limit", "1")
	require.Equal(t, []string{"default/pay-rerun"}, keys)
	require.NotEmpty(t, next)
	keys, next = listKeys(t, e, "--rerun-pending", "--limit", "1", "--after", next)
	require.Equal(t, []string{"billing/inv-rerun"}, keys)
	require.Empty(t, next)
	keys, _ = listKeys(t, e, "--uncertain")
	require.Equal(t, []string{"default/pay-unc"}, keys)

	r = e.run("list", "--rerun-pending", "--uncertain")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "not both")

	h := e.run("list", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending    executing with an expired lease and a re-run left")
	require.Contains(t, h.stdout, "sentinel list --rerun-pending -n payments")
}
