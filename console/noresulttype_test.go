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

// A force-complete form for a key with no declared result type said
// nothing about the value's shape: an operator typing {"chargeId": ...}
// for a caller's {"charge_id": ...} was told "done", and every caller got
// ErrResult from then on. The form now says that the value is checked only
// as JSON, what a caller whose type it does not fit gets, and how to
// replace it; with a result type declared, the type is shown instead.
func TestForceCompleteFormSaysNoResultType(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "charge-9")
	ex, err := c.Inspect(ctx, "charge-9")
	require.NoError(t, err)
	rec, err := c.Reconcile(ctx, "charge-9", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	u := s.URL + "/ops/confirm?" + url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {"charge-9"}, "token": {strconv.FormatInt(rec.Token, 10)}}.Encode()
	code, body := get(t, u)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="no-result-type"`)
	require.Contains(t, body, "checked only as JSON")

	// What the note says is what happens: a wrong member name reaches the
	// caller as ErrResult, not as a zero receipt.
	fc := confirmForm(t, s.URL, "force_complete", "default", "charge-9", rec.Token)
	fc.Set("value", `{"chargeId": "ch_9", "amount": 900}`)
	code, body = post(t, s.URL, fc)
	require.Equal(t, http.StatusOK, code, body)
	res, err := sentinel.Once(ctx, c, "charge-9", func(context.Context) (receipt, error) { return receipt{}, errors.New("fn must not run") })
	require.ErrorIs(t, err, sentinel.ErrResult)
	require.Equal(t, receipt{}, res.Value)

	require.NoError(t, sentinel.RegisterResultType[receipt](ctx, c, "pay-"))
	uncertain(t, c, "pay-9")
	ex, err = c.Inspect(ctx, "pay-9")
	require.NoError(t, err)
	rec, err = c.Reconcile(ctx, "pay-9", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {"pay-9"}, "token": {strconv.FormatInt(rec.Token, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="no-result-type"`)
	require.Contains(t, body, `id="result-shape"`)
}
