package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A refused completion of an earlier run (reset since: the operator
// decided its effect did not happen) is not offered as the result of the
// run being reconciled now: its value is not what this run returned.
func TestEvidenceOfAnEarlierRunNotOffered(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	// Run 1: fn returns a receipt after its hard TTL: completion refused.
	refusedOnce(t, c, "charge", "receipt-of-run-1", nil)
	hist, err := c.History(ctx, "charge")
	require.NoError(t, err)
	var old int64
	for _, ev := range hist {
		if ev.Type == "completion_refused" {
			old = ev.ID
		}
	}
	require.NotZero(t, old)
	// The operator finds it did not happen, and resets.
	_, err = c.Reconcile(ctx, "charge")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctx, "charge"))
	// Run 2 fails midway: uncertain, no evidence of its own.
	_, err = sentinel.Once(ctx, c, "charge", func(context.Context) (string, error) { return "", errors.New("timeout") })
	require.Error(t, err)
	ex, err := c.Reconcile(ctx, "charge")
	require.NoError(t, err)

	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/key?ns=default&key=charge")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="use-refused-`, "run 1's result offered as run 2's")

	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {"charge"},
		"token": {strconv.FormatInt(ex.Token, 10)}, "evidence": {strconv.FormatInt(old, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "receipt-of-run-1", "the confirmation filled in run 1's result")
}
