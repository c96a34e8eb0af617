package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// fn returned Final(err) after its lease was lost, so its completion was
// refused. The caller's error (and the operator who reads it in a log)
// was told "fn succeeded ...: Reconcile the key, then ForceComplete it
// with that result": done so, every later caller gets fn's value as a
// success, never the decline. It now says fn returned a Final outcome,
// with its error, and that ForceComplete would turn it into a success.
func TestRefusedFinalOutcomeIsNotCalledASuccess(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	_, err := sentinel.Once(ctx, c, "charge-9", func(ctx context.Context) (int, error) {
		started := time.Now() // after the claim: its hard TTL ends before started+300ms
		<-ctx.Done()          // the hard TTL ends the lease while fn works
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return 0, sentinel.Final(errors.New("card declined"))
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.NotContains(t, err.Error(), "fn succeeded")
	require.Contains(t, err.Error(), `Final outcome ("card declined")`)
}
