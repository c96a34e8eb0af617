package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A worker that dies leaves its key executing; the key becomes uncertain
// when its lease expires, and nothing writes an event then. A page left
// open with its live view on ("● live") kept saying "No uncertain keys in
// any namespace" at its top: the live view announced the worker's claim
// as a change, never that the key now needs an operator. The live view
// now reads the counts again every few seconds and says when they differ
// from the page's. In a real browser.
func TestBrowserLiveViewSaysWhenAttentionCountsChange(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	text, ok := waitText(t, bctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "status %q", text)
	var counts string
	require.NoError(t, chromedp.Run(bctx, chromedp.Text(`#uncertain-counts`, &counts, chromedp.ByID)))
	require.Contains(t, counts, "No uncertain keys")

	killWorker(t, schema, "pay-dead") // its lease (1s) then expires, no event written
	waitUncertain(t, c, "pay-dead")
	text, ok = waitText(t, bctx, "attention-banner", 15*time.Second, func(s string) bool { return strings.Contains(s, "default: 1") })
	require.True(t, ok, "the key is uncertain and the page, live, says %q", text)
	require.Contains(t, text, "ncertain")
	require.Contains(t, text, "Reload")
}
