package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An operator's reset hands the key back (claimed, its lease ended then):
// nothing holds it. The row keeps the stopped worker's hard expiry, and
// the key page showed it as "Hard expiry" as if it still bounded a claim.
// It now says there is none, and whose the kept one was.
func TestKeyPageHardExpiryAfterReset(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.False(t, ex.HardExpiresAt.IsZero(), "the worker's claim had a hard expiry")
	old := ex.HardExpiresAt.UTC().Format("2006-01-02 15:04:05.000Z")
	_, err = c.Reconcile(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctx, "k"))
	s := server(t, c, console.Options{ReadOnly: true})

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {"k"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "<th>Hard expiry</th><td>"+old, "the stopped worker's hard expiry bounds nothing now")
	require.Contains(t, body, `<th>Hard expiry</th><td id="key-hard">none <small>(nothing holds the key; `+old+` was the previous holder's)</small>`)

	// A key a worker holds shows its own.
	_, err = sentinel.Once(ctx, c, "k", func(ctx2 context.Context) (int, error) {
		got, err := c.Inspect(ctx, "k")
		require.NoError(t, err)
		_, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {"k"}}.Encode())
		require.Contains(t, body, `<th>Hard expiry</th><td id="key-hard">`+got.HardExpiresAt.UTC().Format("2006-01-02 15:04:05.000Z")+`</td>`)
		return 1, nil
	})
	require.NoError(t, err)
}
