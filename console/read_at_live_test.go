package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The pages with a live view (executions, a key) did not say when they
// were read: without JavaScript (no live view) they went stale as the tab
// stayed open and nothing said so. They now say it as the other pages do;
// with the live view on, the note says the rows stay as read and the
// banner counts the changes since (checked in a real browser).
func TestLivePagesSayWhenTheyWereRead(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "pay-1")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	for _, p := range []string{"", "?state=all", "key?ns=default&key=pay-1"} {
		code, body := get(t, s.URL+"/ops/"+p)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="read-at"`, "page %q: no word of when it was read", p)
		require.Contains(t, body, "this page does not update itself", "page %q: what a page without its live view does", p)
	}
	if chromePath() == "" {
		return
	}
	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(s.URL+"/ops/"), chromedp.WaitVisible(`#read-at`, chromedp.ByID)))
	var text string
	deadline := time.Now().Add(5 * time.Second)
	for {
		require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.getElementById("read-at").innerText`, &text)))
		if strings.Contains(text, "live view") || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.Contains(t, text, "live view", "with the live view on the note says %q", text)
	require.NotContains(t, text, "does not update itself")
}
