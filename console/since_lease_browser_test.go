package console_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A running key's row, and its page, marked uncertain once its lease
// expired as read (lease-state), kept the Since it was read with: when
// the attempt started. A reload shows the lease's end (Execution.Since).
// lease-state now answers "since" too, and the page shows it, counting
// on from it ("3.1s ago"), as a reload would. In a real browser.
func TestBrowserMarkedRowShowsSinceOfTheLeaseEnd(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	kill := startWorker(t, schema, "pay-dies", 3*time.Second)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	list, key := browser(t), browser(t)
	require.NoError(t, chromedp.Run(list, chromedp.Navigate(s.URL+"/ops/?state=all"), chromedp.WaitVisible(`#read-at`, chromedp.ByID)))
	require.NoError(t, chromedp.Run(key, chromedp.Navigate(s.URL+"/ops/key?ns=default&key=pay-dies"), chromedp.WaitVisible(`#key-state`, chromedp.ByID)))
	time.Sleep(1500 * time.Millisecond) // a renewal or more: the lease ends after the attempt's start by more than its TTL
	kill()

	type cells struct{ State, Since string }
	rowOf := func() cells {
		var r []string
		require.NoError(t, chromedp.Run(list, chromedp.Evaluate(`(() => { const tr = document.querySelector('tr[data-key="pay-dies"]'); return tr ? [tr.cells[2].innerText, tr.cells[5].innerText] : ["", ""]; })()`, &r)))
		return cells{r[0], r[1]}
	}
	keyOf := func() cells {
		var r []string
		require.NoError(t, chromedp.Run(key, chromedp.Evaluate(`[document.getElementById("key-state").innerText, document.querySelector("#key-state").closest("table").rows[Array.from(document.querySelector("#key-state").closest("table").rows).findIndex(r => r.cells[0].innerText === "In this state since")].cells[1].innerText]`, &r)))
		return cells{r[0], r[1]}
	}
	var row, page cells
	deadline := time.Now().Add(30 * time.Second)
	for {
		row, page = rowOf(), keyOf()
		if row.State == "uncertain" && strings.HasPrefix(page.State, "uncertain") {
			break
		}
		require.True(t, time.Now().Before(deadline), "not marked: row %+v, page %+v", row, page)
		time.Sleep(200 * time.Millisecond)
	}
	ex, err := c.Inspect(ctxT(t), "pay-dies")
	require.NoError(t, err)
	require.False(t, ex.LeaseAlive)
	require.True(t, ex.LeaseExpiresAt.After(ex.UpdatedAt))
	const layout = "2006-01-02 15:04:05.000Z"
	want := ex.LeaseExpiresAt.UTC().Format(layout)
	require.NotEqual(t, ex.UpdatedAt.UTC().Format(layout), want)
	time.Sleep(1100 * time.Millisecond) // a tick of the ages
	row, page = rowOf(), keyOf()
	require.Regexp(t, `^`+want+`\s+\d+(\.\d)?s ago$`, row.Since, "the row's Since: %+v", row)
	require.Regexp(t, `^`+want+`\s+\d+(\.\d)?s ago$`, page.Since, "the page's since: %+v", page)

	// lease-state answers the key's since.
	resp, err := http.Get(s.URL + "/ops/lease-state?" + url.Values{"ns": {"default"}, "key": {"pay-dies"}}.Encode())
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct {
		Since string `json:"since"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	at, err := time.Parse(time.RFC3339Nano, st.Since)
	require.NoError(t, err)
	require.True(t, ex.LeaseExpiresAt.Equal(at), "since %s, the lease's end %v", st.Since, ex.LeaseExpiresAt)
}
