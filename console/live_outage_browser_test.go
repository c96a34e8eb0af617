package console_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/internal/pgtemp"
)

// waitText polls the text of the element with id until ok accepts it, for
// at most within; it returns the last text read and whether ok accepted it.
func waitText(t *testing.T, ctx context.Context, id string, within time.Duration, ok func(string) bool) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	var text string
	for {
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`(() => { const e = document.getElementById(`+jsString(id)+`); return e && !e.hidden ? e.textContent : ""; })()`, &text)))
		if ok(text) {
			return text, true
		}
		if time.Now().After(deadline) {
			return text, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// During a database outage the live view said "● live": the server's
// follower retried quietly and caught up afterwards, and the operator was
// not told that the page was not following meanwhile. The status now says,
// within seconds, that the live view is paused because the database does
// not answer and that it resumes by itself; once the database answers it
// is "● live" again and what was missed arrives.
func TestBrowserLiveViewSaysPausedWhileDatabaseDown(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	ctx := ctxT(t)
	cl, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		t.Skipf("no local PostgreSQL binaries for a private cluster: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	p, err := pgxpool.New(ctx, cl.URL())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Migrate(ctx))

	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t) // closed before the server: its live stream ends first
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	text, ok := waitText(t, bctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "status %q", text)

	require.NoError(t, cl.Stop(ctx, "fast"))
	down := time.Now()
	text, ok = waitText(t, bctx, "live-status", 8*time.Second, func(s string) bool { return strings.Contains(s, "paused") })
	require.True(t, ok, "8s into the outage the status still says %q", text)
	t.Logf("status %s after the database stopped: %q", time.Since(down).Round(100*time.Millisecond), text)
	require.Contains(t, text, "database does not answer")
	require.Contains(t, text, "resumes by itself")
	shot(t, bctx, "live-paused")

	require.NoError(t, cl.Start(ctx))
	uncertain(t, c, "after-the-outage") // made before the page follows again
	text, ok = waitText(t, bctx, "live-status", 15*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "the database is back and the status says %q", text)
	var line string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.WaitVisible(`#live-events li`, chromedp.ByQuery),
		chromedp.Text(`#live-events`, &line, chromedp.ByID)))
	require.Contains(t, line, "after-the-outage", "an event made as the database came back was missed")
}
