package console_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// runElector runs an elector of group on c until the test ends (or stop).
func runElector(t *testing.T, c *sentinel.Client, group string) (*sentinel.Elector, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctxT(t))
	el, err := c.Elector(group, sentinel.ElectorOptions{AppVersion: "2.0.1"})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-ran
		}
	}
	t.Cleanup(stop)
	require.Eventually(t, el.IsLeader, 10*time.Second, 20*time.Millisecond)
	return el, stop
}

// The elections page lists every group of every namespace without a group
// typed in (a resigned one shown without leader), and a click opens a
// group's leader and members. In a real browser.
func TestBrowserElectionGroups(t *testing.T) {
	c, schema := newClient(t)
	billing, err := sentinel.New(c.Pool(), &sentinel.Config{Schema: schema, Namespace: "billing"})
	require.NoError(t, err)
	t.Cleanup(billing.Close)
	sched, _ := runElector(t, c, "scheduler")
	_, _ = runElector(t, billing, `<b>invoicer</b>`)
	_, stopOld := runElector(t, c, "old-cron")
	stopOld() // resigned: its row stays, with no leader

	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/elections")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "&lt;b&gt;invoicer&lt;/b&gt;")

	ctx := browser(t)
	var groups []string
	var noLeader string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.URL+"/ops/"),
		chromedp.WaitVisible(`main`, chromedp.ByQuery),
	))
	clickLink(t, ctx, "Elections", `#groups`)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(`[...document.querySelectorAll('#groups tbody tr')].map(r => r.cells[0].textContent + "/" + r.cells[1].textContent)`, &groups),
		chromedp.Evaluate(`[...document.querySelectorAll('#groups tbody tr')].find(r => r.cells[1].textContent === "old-cron").textContent`, &noLeader),
	))
	require.Equal(t, []string{"billing/<b>invoicer</b>", "default/old-cron", "default/scheduler"}, groups)
	require.Contains(t, noLeader, "no leader")
	shot(t, ctx, "election-groups")

	clickLink(t, ctx, "scheduler", `#leader`)
	var term string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(
		`[...document.querySelectorAll('#leader tr')].find(r => r.cells[0].textContent === "Term").cells[1].textContent`, &term)))
	require.Equal(t, strconv.FormatInt(sched.Term(), 10), term)
}
