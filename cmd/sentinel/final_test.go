package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn returned Final(err) (a declined card: an outcome, not a doubt) after
// its lease was lost, so its completion was refused. inspect said "fn
// returned success", and reconcile printed a force-complete command
// carrying fn's value (here a zero receipt) as "store fn's result": run as
// printed, every caller got that zero receipt, Cached and with a nil
// error, instead of the decline. Both now say that fn returned a Final
// outcome, with its error, and no printed command stores fn's value as if
// it were a success.
func TestRefusedFinalOutcomeIsNotOfferedAsASuccess(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "charge-9", func(ctx context.Context) (receipt, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+300ms
		<-ctx.Done()          // the hard TTL ends the lease while fn works
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return receipt{}, sentinel.Final(errors.New("card declined"))
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	r := e.run("inspect", "charge-9")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "fn returned success", r.stdout)
	require.Contains(t, r.stdout, "card declined", r.stdout)

	r = e.run("reconcile", "charge-9", "--yes")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "card declined", r.stdout)
	for _, c := range printedCommands(r.stdout) {
		require.NotContains(t, c, `"charge_id":""`, "a printed command stores fn's value as a success:\n%s", r.stdout)
	}
	complete := findCommand(t, r.stdout, "sentinel force-complete")
	require.Equal(t, "sentinel force-complete charge-9 -n default --token", complete[:len("sentinel force-complete charge-9 -n default --token")], complete)
	findCommand(t, r.stdout, "sentinel reset")

	// Nothing was written but the reconciliation.
	got, err := e.client.Inspect(ctxT(t), "charge-9")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, got.State)
}
