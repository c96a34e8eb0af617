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
	ctx, cl, c, bctx := liveOnPrivateCluster(t)
	var (
		text string
		ok   bool
	)

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

// After an outage long enough for Follow's retries to back off (to 5s
// between attempts), the status said "● live" as soon as the database
// answered a ping, while the follower still slept out its back-off: for up
// to 5s the page claimed to follow and a change made then did not show.
// It now says "● live" only once the follower has read the events again:
// a change made when it says so shows within moments.
func TestBrowserLiveViewLiveOnlyOnceReadingAgain(t *testing.T) {
	ctx, cl, c, bctx := liveOnPrivateCluster(t)
	var (
		text string
		ok   bool
	)

	require.NoError(t, cl.Stop(ctx, "fast"))
	down := time.Now()
	text, ok = waitText(t, bctx, "live-status", 8*time.Second, func(s string) bool { return strings.Contains(s, "paused") })
	require.True(t, ok, "8s into the outage the status still says %q", text)
	// Long enough for the follower's back-off to reach its ceiling: its
	// retries come 12.5ms, 25ms, ... 3.2s apart, 6.4s in all, then 5s:
	// started now, the database answers seconds before its next attempt.
	time.Sleep(time.Until(down.Add(7 * time.Second)))
	require.NoError(t, cl.Start(ctx))
	started := time.Now()
	text, ok = waitText(t, bctx, "live-status", 15*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "the database is back and the status says %q", text)
	live := time.Now()
	t.Logf("live %s after the database was started", live.Sub(started).Round(10*time.Millisecond))
	uncertain(t, c, "made-when-live")
	made := time.Now()
	text, ok = waitText(t, bctx, "live-events", 1500*time.Millisecond, func(s string) bool { return strings.Contains(s, "made-when-live") })
	require.True(t, ok, "the status said live; a change made %s later had not shown 1.5s after it was made: %q",
		made.Sub(live).Round(10*time.Millisecond), text)
}

// liveOnPrivateCluster serves a read-only console on a migrated private
// cluster (which the test may stop and start) and opens its executions
// page in Chromium, its live view at "● live". It skips the test without
// Chromium or PostgreSQL binaries.
func liveOnPrivateCluster(t *testing.T) (context.Context, *pgtemp.Cluster, *sentinel.Client, context.Context) {
	t.Helper()
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
	return ctx, cl, c, bctx
}
