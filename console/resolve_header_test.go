package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A header the resolve form cannot turn into a valid HTTP header (a name
// with characters HTTP does not allow, a value with a control character)
// is refused when the operator writes it, nothing stored: stored, it was
// never delivered as typed to the client's retries.
func TestResolveRefusesAnInvalidHeader(t *testing.T) {
	c, _ := newClient(t)
	api := newChargeAPI(t, c)
	s := server(t, c, console.Options{OperatorToken: opToken})
	api.post(t, "pay-1", `{"amount":4200}`)
	execKey := idempotency.ExecutionKey("acct_42", "pay-1")
	ex, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	for _, h := range []string{"X-Charge(id): ch_1", "Ünicode: 1", "X-Note: a\x01b"} {
		form := confirmForm(t, s.URL, "resolve", "default", execKey, ex.Token)
		form.Set("status", "201")
		form.Set("headers", "Content-Type: application/json\r\n"+h)
		form.Set("body", `{"charge_id":"ch_1"}`)
		code, body := post(t, s.URL, form, "Origin", s.URL)
		require.Equal(t, http.StatusBadRequest, code, "header %q accepted: %s", h, body)
		require.Contains(t, body, "Nothing was changed")
		now, err := c.Inspect(ctxT(t), execKey)
		require.NoError(t, err)
		require.Equal(t, ex.Token, now.Token, "header %q: something was written", h)
	}
	// A valid one goes through.
	form := confirmForm(t, s.URL, "resolve", "default", execKey, ex.Token)
	form.Set("status", "201")
	form.Set("headers", "Content-Type: application/json\r\nX-Charge-Id: ch_1")
	form.Set("body", `{"charge_id":"ch_1"}`)
	code, body := post(t, s.URL, form, "Origin", s.URL)
	require.Equal(t, http.StatusOK, code, body)
}
