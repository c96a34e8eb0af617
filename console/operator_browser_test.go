package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// receipt is the result type the application declares for its charges.
type receipt struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// clientIn returns a client of c's schema in namespace ns.
func clientIn(t *testing.T, schema, ns string) *sentinel.Client {
	t.Helper()
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema, Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Issue 25 in a real browser: the start page lists every namespace and
// the top of every page counts each namespace's uncertain keys (25.1); a
// force-complete whose value has a typo is refused against the declared
// result type, with the path of the error and the expected shape shown,
// and nothing is written; the corrected value is accepted and the caller
// gets it (25.3); a key handed back is shown as such (25.4).
func TestBrowserOperatorSeat(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t) // namespace "default"
	pay := clientIn(t, schema, "payments")
	require.NoError(t, sentinel.RegisterResultType[receipt](ctxT(t), pay, "pay-"))
	uncertain(t, pay, "pay-1")
	uncertain(t, pay, "charge-job-92")
	uncertain(t, c, "nightly-report")
	_, err := sentinel.Once(ctxT(t), c, "retry-me", func(context.Context) (int, error) {
		return 0, sentinel.Retryable(errors.New("card network unreachable"))
	})
	require.Error(t, err)

	h, err := console.New(c, console.Options{OperatorToken: opToken})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t)

	// The start page: every namespace, uncertain first; the counts.
	var rows map[string]string
	var counts string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.URL+"/"),
		chromedp.WaitVisible(`tr.uncertain`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#section-Uncertain tr[data-key]')].map(r => [r.dataset.key, r.cells[1].innerText]))`, &rows),
		chromedp.Text(`#uncertain-counts`, &counts, chromedp.ByID),
	))
	require.Equal(t, map[string]string{"pay-1": "payments", "charge-job-92": "payments", "nightly-report": "default"}, rows)
	require.Contains(t, counts, "payments: 2")
	require.Contains(t, counts, "default: 1")
	shot(t, ctx, "every-namespace")

	// Every page carries the counts: the leases page too, and a count
	// leads to that namespace's uncertain keys.
	var href string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.URL+"/leases"),
		chromedp.WaitVisible(`#uncertain-counts a[data-ns="payments"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector('#uncertain-counts a[data-ns="payments"]').href`, &href),
	))
	rows = nil // Evaluate decodes into the map: a fresh one
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(href),
		chromedp.WaitVisible(`tr.uncertain`, chromedp.ByQuery),
		chromedp.Evaluate(`Object.fromEntries([...document.querySelectorAll('#section-Uncertain tr[data-key]')].map(r => [r.dataset.key, r.cells[1].innerText]))`, &rows),
	))
	require.Equal(t, map[string]string{"pay-1": "payments", "charge-job-92": "payments"}, rows)

	// A handed-back key is "handed back, safe to retry", not in progress.
	var state string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(s.URL+"/?state=claimed"),
		chromedp.WaitVisible(`tr[data-key="retry-me"]`, chromedp.ByQuery),
		chromedp.Text(`tr[data-key="retry-me"] .badge`, &state, chromedp.ByQuery),
	))
	require.Equal(t, "handed back, safe to retry", state)

	// pay-1: reconcile, then force-complete with a typo.
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/")))
	openKey(t, ctx, "pay-1")
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	heading, _ := confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, heading, "done")
	clickLink(t, ctx, "← Back", "#key-name")
	clickLink(t, ctx, "Force-complete", "#confirm-button")
	var shape string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`#result-shape`, &shape, chromedp.ByID)))
	require.Equal(t, `{"charge_id": string, "amount": integer}`, shape)
	shot(t, ctx, "result-type")
	heading, text := confirmAs(t, ctx, "Ada Lovelace", opToken, `{"chargeid": "ch_1", "amount": 500}`)
	require.Contains(t, heading, "refused")
	require.Contains(t, text, "at $.chargeid: unknown member")
	require.Contains(t, text, "receipt")
	ex, err := pay.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State, "a refused value was written")

	// Back to the form: the value as typed, what is wrong with it.
	formAgain(t, ctx)
	var typed, why string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Value(`#value`, &typed, chromedp.ByID),
		chromedp.Text(`p.error`, &why, chromedp.ByQuery)))
	require.JSONEq(t, `{"chargeid": "ch_1", "amount": 500}`, typed)
	require.Contains(t, why, "$.chargeid")
	heading, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, `{"charge_id": "ch_1", "amount": 500}`)
	require.Contains(t, heading, "done")
	res, err := sentinel.Once(ctxT(t), pay, "pay-1", func(context.Context) (receipt, error) {
		return receipt{}, errors.New("fn must not run again")
	})
	require.NoError(t, err)
	require.True(t, res.Cached)
	require.Equal(t, receipt{ChargeID: "ch_1", Amount: 500}, res.Value)
}

// Options.Namespace sets the start page's namespace; the counts still
// cover every namespace.
func TestStartPageNamespaceOption(t *testing.T) {
	c, schema := newClient(t)
	uncertain(t, clientIn(t, schema, "payments"), "charge-job-92")
	uncertain(t, c, "nightly-report")
	for ns, want := range map[string][]string{"": {"charge-job-92", "nightly-report"}, "default": {"nightly-report"}} {
		h, err := console.New(c, console.Options{ReadOnly: true, Namespace: ns})
		require.NoError(t, err)
		s := httptest.NewServer(h)
		resp, err := http.Get(s.URL + "/")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.Close()
		body := string(b)
		for _, k := range []string{"charge-job-92", "nightly-report"} {
			row := fmt.Sprintf(`data-key="%s"`, k)
			if contains(want, k) {
				require.Contains(t, body, row, "namespace option %q", ns)
			} else {
				require.NotContains(t, body, row, "namespace option %q", ns)
			}
		}
		require.Contains(t, body, `data-ns="payments">payments: 1<`)
		require.Contains(t, body, `data-ns="default">default: 1<`)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
