package console_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The live view gave up without saying so: a reconnection answered with
// 500 left the status at "○ reconnecting" although the browser had given
// up, and the failure event said "live view stopped" with no word of what
// to do. The status now says when it stopped and to reload the page, with
// a link that does.
func TestBrowserLiveViewStoppedSaysReload(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	h, err := console.New(c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	// mode 1: the events stream answers 500; mode 2: it sends the failure
	// event a Follow that failed sends.
	var mode atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			switch mode.Load() {
			case 1:
				http.Error(w, "sentinel: follow: boom", http.StatusInternalServerError)
				return
			case 2:
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = fmt.Fprint(w, "retry: 2000\n\nevent: failure\ndata: \"sentinel: follow: relation \\\"events\\\" does not exist\"\n\n")
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	ctx := browser(t) // closed before the server: its live stream ends first

	stopped := func(what string) {
		t.Helper()
		text, ok := waitText(t, ctx, "live-status", 10*time.Second, func(s string) bool { return strings.Contains(s, "stopped") })
		require.True(t, ok, "%s: the browser gave up and the status says %q", what, text)
		require.Contains(t, text, "reload", what)
		var href, page string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Evaluate(`(document.querySelector('#live-status a') || {}).href || ""`, &href),
			chromedp.Evaluate(`window.location.href`, &page)))
		require.Equal(t, page, href, "%s: no link that reloads the page", what)
	}

	// A reconnection answered with 500: the browser does not retry.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/?state=all"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	text, ok := waitText(t, ctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "status %q", text)
	mode.Store(1)
	s.CloseClientConnections() // the stream ends; the browser reconnects
	stopped("reconnection answered 500")

	// The stream's own failure event.
	mode.Store(2)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/?state=all"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	stopped("failure event")
	text, _ = waitText(t, ctx, "live-status", 0, func(string) bool { return true })
	require.Contains(t, text, "does not exist", "the failure's reason")

	// The link reloads: with the stream back, the page follows again.
	mode.Store(0)
	require.NoError(t, chromedp.Run(ctx, chromedp.Click(`#live-status a`, chromedp.ByQuery)))
	text, ok = waitText(t, ctx, "live-status", 5*time.Second, func(s string) bool { return s == "● live" })
	require.True(t, ok, "after the reload the status says %q", text)
}
