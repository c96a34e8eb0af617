package console_test

import (
	"regexp"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The live view's times say their zone, as every time on the pages does
// (2026-11-28 08:31:02.507Z): they were shown without it, cut at the
// millisecond, for an operator to read as local time.
func TestBrowserLiveTimesSayUTC(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true})
	ctx := browser(t) // closed before the server: its live stream ends first
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#live-status`, chromedp.ByID)))
	uncertain(t, c, "late-arrival")
	var line string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.WaitVisible(`#live-events li`, chromedp.ByQuery),
		chromedp.Text(`#live-events li`, &line, chromedp.ByQuery)))
	require.Regexp(t, regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z `), line)
}
