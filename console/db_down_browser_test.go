package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A page loaded while the database did not answer said so, and to reload
// it once it answers; but nothing told the operator when that was, and
// the executions page's live status turned to "● live" once the database
// answered while the page under it still said "The database does not
// answer" and listed nothing. Such a page (read with GET) now waits for the
// database and reloads itself once it answers, saying so meanwhile, with
// or without a live view of its own. In a real browser.
func TestBrowserPageReadWhileDatabaseDownFollowsOn(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, p, down := downableClient(t, "")
	uncertain(t, c, "pay-1")
	l, err := c.Lease(ctxT(t), "report-lock", sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t)

	for _, tc := range []struct{ page, ready string }{
		{"", `tr[data-key]`},                      // a live view of its own
		{"leases", `#leases`},                     // none
		{"key?ns=default&key=pay-1", `#key-name`}, // the message page of a read that failed
	} {
		down.Store(true)
		p.Reset()
		require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"+tc.page), chromedp.WaitVisible(`#db-down`, chromedp.ByID)))
		text, ok := waitText(t, bctx, "live-status", 8*time.Second, func(s string) bool { return strings.Contains(s, "reloads by itself") })
		require.True(t, ok, "page %q, read while the database is down, says %q", tc.page, text)
		require.Contains(t, text, "database", "page %q", tc.page)

		down.Store(false)
		var shown bool
		deadline := time.Now().Add(15 * time.Second)
		for !shown && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
			require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`!!document.querySelector(`+jsString(tc.ready)+`) && !document.getElementById("db-down")`, &shown)))
		}
		require.True(t, shown, "page %q: the database answers again, and the page still says it does not", tc.page)
	}
}
