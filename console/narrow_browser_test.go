package console_test

import (
	"net/url"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// In a narrow window (a phone on call, a split screen at 390 CSS pixels)
// the executions table and a key's facts ran off the right edge: the whole
// page scrolled sideways, and on the confirmation page the owner and
// host of the key to act on were cut off. The pages now fit the window;
// a wide table scrolls inside itself.
func TestBrowserNarrowWindowFits(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	const key = "order-2026-11-28-0000001-with-a-long-idempotency-key"
	pay := clientIn(t, schema, "payments")
	uncertain(t, pay, key)
	ex, err := pay.Inspect(ctxT(t), key)
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	ctx := browser(t)
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(390, 800, chromedp.EmulateScale(2), chromedp.EmulateMobile)))
	q := url.Values{"ns": {"payments"}, "key": {key}}
	cq := url.Values{"action": {"reconcile"}, "ns": {"payments"}, "key": {key}, "token": {strconv.FormatInt(ex.Token, 10)}}
	for _, u := range []string{"/ops/", "/ops/key?" + q.Encode(), "/ops/confirm?" + cq.Encode()} {
		var scroll, client int64
		var cut []string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(s.URL+u),
			chromedp.WaitVisible(`main`, chromedp.ByQuery),
			chromedp.Evaluate(`document.documentElement.scrollWidth`, &scroll),
			chromedp.Evaluate(`document.documentElement.clientWidth`, &client),
			// Text cut off at the right edge: a cell whose box ends past
			// the window, in no container that scrolls.
			chromedp.Evaluate(`[...document.querySelectorAll('main td, main th')].filter(e => {
				if (e.getBoundingClientRect().right <= document.documentElement.clientWidth + 1) return false;
				for (let p = e.parentElement; p; p = p.parentElement) {
					if (getComputedStyle(p).overflowX === 'auto' || getComputedStyle(p).overflowX === 'scroll') return false;
				}
				return true;
			}).map(e => e.textContent.trim().slice(0, 40))`, &cut),
		))
		require.LessOrEqual(t, scroll, client, "%s: the page scrolls sideways in a 390px window", u)
		require.Empty(t, cut, "%s: cells cut off at the window's edge", u)
	}
}
