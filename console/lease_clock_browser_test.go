package console_test

import (
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// skewDate makes the page's Date.now run offset ms off from the real
// clock, from before any script of the page runs; window.__clockJump(ms)
// moves it later (a clock stepped by NTP, a host's clock set by hand).
func skewDate(offset time.Duration) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		_, err := page.AddScriptToEvaluateOnNewDocument(`(() => {
			const real = Date.now.bind(Date);
			let off = ` + strconv.FormatInt(offset.Milliseconds(), 10) + `;
			window.__clockJump = ms => { off += ms; };
			Date.now = () => real() + off;
		})();`).Do(ctx)
		return err
	})
}

// A running row is read again (lease-state) once its lease has expired:
// the page decided when from its own clock, counted on from the
// console's clock at the read (data-read-at), against the lease expiry
// as the database wrote it. A console whose host clock is 10 minutes
// behind the database's (sentinel serve on an operator's laptop) made
// the page ask 10 minutes late, and a browser clock stepped back 10
// minutes after the page was read did the same: all that time the dead
// worker's row still said executing. (An uncertain key is caught anyway
// when the counts at the top change; a key with re-runs left, rerun
// pending, is not counted there.) The page now counts down the lease
// time the database says is left (data-lease-left-ms, lease_left_ms) on
// its monotonic clock, whatever the offset of either wall clock. In a
// real browser.
func TestBrowserLeaseWatchIgnoresClockOffsets(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	kill := startWorker(t, schema, "pay-rerun", 3*time.Second, "SENTINEL_CHILD_RERUN=2")
	serve := func(clockOffset time.Duration) string {
		h, err := console.New(c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		console.SetClock(h, func() time.Time { return time.Now().Add(clockOffset) })
		s := httptest.NewServer(h)
		t.Cleanup(s.Close)
		return s.URL + "/?state=all"
	}
	// slow: the console's clock 10 minutes behind the database's, the
	// browser's 7 minutes ahead of the true time. stepped: both right
	// when the page is read; then the browser's clock is stepped back 10
	// minutes.
	slowURL, steppedURL := serve(-10*time.Minute), serve(0) // before the browsers: closed after them
	slow, stepped := browser(t), browser(t)
	require.NoError(t, chromedp.Run(slow, skewDate(7*time.Minute), chromedp.Navigate(slowURL), chromedp.WaitVisible(`#read-at`, chromedp.ByID)))
	require.NoError(t, chromedp.Run(stepped, skewDate(0), chromedp.Navigate(steppedURL), chromedp.WaitVisible(`#read-at`, chromedp.ByID)))
	require.NoError(t, chromedp.Run(stepped, chromedp.Evaluate(`window.__clockJump(-10 * 60 * 1000)`, nil)))
	rowState := func(ctx context.Context) string {
		var st string
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`(() => { const tr = document.querySelector('tr[data-key="pay-rerun"]'); return tr ? tr.cells[2].innerText : ""; })()`, &st)))
		return st
	}
	require.Equal(t, "executing", rowState(slow), "as read: its worker runs")
	require.Equal(t, "executing", rowState(stepped), "as read: its worker runs")
	kill()
	deadline := time.Now().Add(30 * time.Second)
	for _, tab := range []struct {
		name string
		ctx  context.Context
	}{{"console clock behind, browser clock ahead", slow}, {"browser clock stepped back", stepped}} {
		for {
			st := rowState(tab.ctx)
			if strings.HasPrefix(st, "rerun") {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s: the dead worker's lease expired long ago and its row still says %q", tab.name, st)
			time.Sleep(200 * time.Millisecond)
		}
	}
}
