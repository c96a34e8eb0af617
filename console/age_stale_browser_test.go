package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// The relative times were written once, when the page was read, and never
// changed: a key page left open (its live view on, so nothing said it was
// as read at some time) kept saying "Lease expires ... in 1.9s, alive"
// long after that time had passed. Renewals and silent expiries write no
// event, so the live view announced nothing either: an operator watching
// a worker's key was told it was alive after it had died. Now every
// relative time counts on in the browser, and a time that was ahead when
// the page was read and has passed since says so (a renewal may have
// moved it, or it expired: reload), "alive" with it. In a real browser.
func TestBrowserRelativeTimesDoNotGoStale(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	holdOnce(t, c, "charge-9", 2*time.Second)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	bctx := browser(t)
	cell := func(row string) string {
		var text string
		require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`[...document.querySelectorAll('table.facts tr')].find(r => r.cells[0].textContent === `+jsString(row)+`).cells[1].innerText`, &text)))
		return text
	}
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/key?ns=default&key=charge-9"), chromedp.WaitVisible(`#key-name`, chromedp.ByID)))
	lease, since := cell("Lease expires"), cell("In this state since")
	require.Regexp(t, `in \d\.\ds, alive`, lease, "the page as read")
	require.Regexp(t, `just now|\d\.\ds ago`, since)
	first := since
	time.Sleep(3500 * time.Millisecond) // past the lease's expiry as read (TTL 2s)
	lease, since = cell("Lease expires"), cell("In this state since")
	require.NotContains(t, lease, "in ", "3.5s after the page was read, a 2s lease as read is still ahead: %q", lease)
	require.NotContains(t, lease, "alive", "%q", lease)
	require.Contains(t, lease, "passed since this page was read", "%q", lease)
	require.NotEqual(t, first, since, "3.5s later the state is still entered %q", since)
	require.Contains(t, since, "s ago")
}

// holdOnce runs a Once on key whose fn waits until the test ends, and
// returns once fn runs: the key is executing, its lease renewed.
func holdOnce(t *testing.T, c *sentinel.Client, key string, ttl time.Duration) {
	t.Helper()
	inside, release := make(chan struct{}), make(chan struct{})
	ran := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (int, error) {
			close(inside)
			<-release
			return 1, nil
		}, sentinel.WithTTL(ttl))
		ran <- err
	}()
	t.Cleanup(func() { close(release); <-ran })
	<-inside
}
