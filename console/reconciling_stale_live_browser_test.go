package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A page left open with its live view on kept its counts as read when a
// key went on reconciling past Options.ReconcilingAfter (1h): the count
// of reconciling keys does not change then, and no event is written, so
// only a reload showed it as needing an operator. The live view now says
// so, in the pages' words. In a real browser.
func TestBrowserLiveViewSaysWhenReconcilingGoesStale(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	reconcilingKey(t, c, "pay", "order")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	text, ok := waitText(t, bctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "status %q", text)

	ageReconciling(t, schema, "order", 2*time.Hour)
	text, ok = waitText(t, bctx, "attention-banner", 20*time.Second, func(s string) bool { return strings.Contains(s, "for more than 1h") })
	require.True(t, ok, "the key is reconciling for 2h and the page, live, says %q", text)
	require.Contains(t, text, "reconciling, needs an operator (for more than 1h) pay: 1")
	require.Contains(t, text, "Reload")
}
