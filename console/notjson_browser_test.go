package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A force-complete value that is not JSON (a trailing comma, a long
// receipt pasted with one brace missing) is refused, and nothing is
// written. The page said only "must be valid JSON", with no place, and
// its Back link led to the key's page: the value typed was gone and had
// to be typed again. It now goes back to the form with the value as typed
// and where the error is, as for a value that does not match the result
// type; the corrected value is accepted.
func TestBrowserForceCompleteNotJSONKeepsTheValue(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	pay := clientIn(t, schema, `pay "eu"/<b>ü</b>`)
	const key = `charge/"42" <i>é</i>`
	uncertain(t, pay, key)
	ex, err := pay.Inspect(ctxT(t), key)
	require.NoError(t, err)
	_, err = pay.Reconcile(ctxT(t), key, sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	ctx := browser(t)

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/ops/")))
	openKey(t, ctx, key)
	clickLink(t, ctx, "Force-complete", "#confirm-button")
	const typed = "{\n  \"charge_id\": \"ch_42\",\n  \"amount\": 1250,\n}"
	heading, text := confirmAs(t, ctx, "Ada Lovelace", opToken, typed)
	require.Contains(t, heading, "refused")
	require.Contains(t, text, "Nothing was changed")
	require.Contains(t, text, "line 4", "where the error is")
	now, err := pay.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, now.State)

	// Back: the form, the value as typed, what is wrong with it.
	formAgain(t, ctx)
	var value, why string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Value(`#value`, &value, chromedp.ByID),
		chromedp.Text(`p.error`, &why, chromedp.ByQuery)))
	require.Equal(t, typed, value)
	require.Contains(t, why, "line 4")
	heading, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, `{"charge_id": "ch_42", "amount": 1250}`)
	require.Contains(t, heading, "done")
	now, err = pay.Inspect(ctxT(t), key)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, now.State)
	require.JSONEq(t, `{"charge_id": "ch_42", "amount": 1250}`, string(now.Result))
}
