package main

import (
	"context"
	"errors"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An operator's reset hands the key back (claimed, its lease ended then):
// nothing holds it, and the row keeps the stopped worker's hard expiry.
// inspect printed it as "hard expiry:", as if it still bounded a claim;
// it now says there is none, and whose the kept one was, as the console's
// key page does.
func TestInspectHardExpiryAfterReset(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "pay-1", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := e.client.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	old := ts(ex.HardExpiresAt)

	r := e.run("inspect", "pay-1")
	requireCode(t, r, exitOK)
	require.Regexp(t, `hard expiry:\s+`+old, r.stdout, "the stopped attempt's, while the key is still its")

	_, err = e.client.Reconcile(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.NoError(t, e.client.ResetToClaimed(ctxT(t), "pay-1"))
	r = e.run("inspect", "pay-1")
	requireCode(t, r, exitOK)
	require.NotRegexp(t, `hard expiry:\s+`+old, r.stdout, "the stopped worker's hard expiry bounds nothing now")
	require.Regexp(t, `hard expiry:\s+none \(nothing holds the key; `+regexp.QuoteMeta(old)+` was the previous holder's\)`, r.stdout)
}
