package console_test

import (
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An operator who typed a force-complete value and mistyped the operator
// token (or left out their name) was refused with "← Back" to the key's
// page: the value typed was gone, to be typed again from nothing. Back now
// leads to the form again, the value as typed, and the refusal says to
// give the token again. In a real browser.
func TestBrowserRefusedFormKeepsTheValue(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	_, err = c.Reconcile(ctxT(t), "pay-1", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	h, err := console.New(c, console.Options{OperatorToken: opToken})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t)

	const value = `{"id": "pay_789", "amount": 9900, "note": "confirmed with the provider at 03:12"}`
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/?state=all")))
	openKey(t, ctx, "pay-1")
	clickLink(t, ctx, "Force-complete", "#confirm-button")
	heading, text := confirmAs(t, ctx, "Ada Lovelace", "not-the-token", value)
	require.Contains(t, heading, "Refused")
	require.Contains(t, text, "Nothing was changed")
	require.Contains(t, text, "again", "what to do: %q", text)
	formAgain(t, ctx)
	var kept string
	require.NoError(t, chromedp.Run(ctx, chromedp.Value(`#value`, &kept, chromedp.ByID)))
	require.Equal(t, value, kept, "the value typed is back in the form")
	heading, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, heading, "done")
	done, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, done.State)
	require.JSONEq(t, value, string(done.Result))
}
