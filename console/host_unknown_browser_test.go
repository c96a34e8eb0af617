package console_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// hostCell is a Host cell as the browser shows it: its text and the
// title (tooltip) of what it holds.
type hostCell struct {
	Text  string `json:"text"`
	Title string `json:"title"`
}

// hostCells reads the cells of the column headed "Host" of every table
// (and the "Host" row of every facts table) of the page at u.
func hostCells(t *testing.T, ctx context.Context, u string) []hostCell {
	t.Helper()
	var cells []hostCell
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(u),
		chromedp.WaitVisible(`main`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => {
			const out = [];
			const cell = c => ({text: c.textContent.trim(), title: [c, ...c.querySelectorAll('[title]')].map(e => e.title || "").join(" ").trim()});
			for (const tb of document.querySelectorAll('main table')) {
				const heads = [...tb.querySelectorAll('thead th')].map(th => th.textContent.trim());
				const i = heads.indexOf("Host");
				if (i >= 0) {
					for (const r of tb.querySelectorAll('tbody tr')) { if (r.cells[i]) out.push(cell(r.cells[i])); }
				}
				for (const r of tb.querySelectorAll('tr')) {
					if (r.cells.length === 2 && r.cells[0].tagName === "TH" && r.cells[0].textContent.trim() === "Host") out.push(cell(r.cells[1]));
				}
			}
			return out;
		})()`, &cells)))
	return cells
}

// Where a holder's host was not recorded (its process could not read its
// host name, or a row written without one) the Host cells of the
// executions, key, leases, queues and elections pages were blank, as if
// the page had failed to show something. They now say "—" and, in the
// tooltip, why. In a real browser.
func TestBrowserHostUnknownSaysSo(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "pay-1")
	l, err := c.Lease(ctx, "report-lock", sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	turn, err := c.Turn(ctx, "printer", sentinel.WithTTL(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = turn.Release(context.Background()) })
	_, _ = runElector(t, c, "scheduler")
	for _, table := range []string{"executions", "leases", "tickets", "leaders", "members"} {
		_, err := admin.Exec(ctx, "UPDATE "+pgx.Identifier{schema, table}.Sanitize()+" SET host = ''")
		require.NoError(t, err)
	}

	s := server(t, c, console.Options{ReadOnly: true})
	bctx := browser(t)
	for _, page := range []string{"?state=all", "key?ns=default&key=pay-1", "leases", "queues", "elections?ns=default&group=scheduler"} {
		cells := hostCells(t, bctx, s.URL+"/ops/"+page)
		require.NotEmpty(t, cells, "page %q has no Host cell", page)
		for _, cell := range cells {
			require.NotEmpty(t, cell.Text, "page %q: a blank Host cell", page)
			require.Contains(t, cell.Text, "—", "page %q", page)
			require.Contains(t, cell.Title, "host not recorded", "page %q: the cell says why", page)
		}
	}
	// The groups' Leader column: "OWNER on HOST".
	var leader hostCell
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(s.URL+"/ops/elections"),
		chromedp.WaitVisible(`#groups`, chromedp.ByID),
		chromedp.Evaluate(`(() => { const c = document.querySelector('#groups tbody tr').cells[2];
			return {text: c.textContent.trim(), title: [...c.querySelectorAll('[title]')].map(e => e.title).join(" ")}; })()`, &leader)))
	require.NotRegexp(t, ` on$`, leader.Text, "the leader's host left blank")
	require.Contains(t, leader.Title, "host not recorded")
}
