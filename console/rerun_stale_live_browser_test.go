package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A page left open with its live view on kept its counts as read when a
// key rerun pending went stale (no caller with WithRerun came back for
// 15m): only a reload showed it under "Rerun pending for more than 15m".
// The live view now says so, as it does when a key becomes uncertain. In
// a real browser.
func TestBrowserLiveViewSaysWhenRerunPendingGoesStale(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	rerunPending(t, c, "mail", "receipt")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	text, ok := waitText(t, bctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "status %q", text)

	table := pgx.Identifier{schema, "executions"}.Sanitize()
	_, err := admin.Exec(ctxT(t), "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
		lease_expires_at = lease_expires_at - interval '20 minutes' WHERE key = 'receipt'`)
	require.NoError(t, err)
	text, ok = waitText(t, bctx, "attention-banner", 20*time.Second, func(s string) bool { return strings.Contains(s, "mail: 1") })
	require.True(t, ok, "the key is rerun pending for 20 minutes and the page, live, says %q", text)
	require.Contains(t, text, "rerun pending, needs an operator (for more than 15m)")
	require.Contains(t, text, "Reload")
}
