package console_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An action's "done" page said what was done at the token the operator
// had seen ("Reconcile "k" (namespace "default") at token 1"), which after
// a reconcile is no longer the key's token, and nothing of what follows:
// after a reconcile every caller gets ErrReconciling until an operator
// force-completes or resets the key, and the page did not say so. Each
// done page now says what changed for callers and, after a reconcile, what
// to do next. In a real browser.
func TestBrowserDonePagesSayWhatFollows(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	uncertain(t, c, "pay-1")
	uncertain(t, c, "pay-2")
	h, err := console.New(c, console.Options{OperatorToken: opToken})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t)
	before, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/?state=all")))
	openKey(t, ctx, "pay-1")
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	heading, text := confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, heading, "done")
	now, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Contains(t, text, fmt.Sprintf("token %d", now.Token), "the key's new token: %q", text)
	require.Contains(t, text, "ErrReconciling", "what callers get now: %q", text)
	require.Contains(t, text, "force-complete", "what to do next: %q", text)
	require.Contains(t, text, "reset", "what to do next: %q", text)
	require.Greater(t, now.Token, before.Token)

	clickLink(t, ctx, "← Back", "#key-name")
	clickLink(t, ctx, "Force-complete", "#confirm-button")
	_, text = confirmAs(t, ctx, "Ada Lovelace", opToken, `{"id":"ch_1"}`)
	require.Contains(t, text, "cached", "what callers get now: %q", text)

	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/?state=all")))
	openKey(t, ctx, "pay-2")
	clickLink(t, ctx, "Reconcile", "#confirm-button")
	_, _ = confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	clickLink(t, ctx, "← Back", "#key-name")
	clickLink(t, ctx, "Reset to claimed", "#confirm-button")
	_, text = confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, text, "runs fn again", "what callers get now: %q", text)
	ran := false
	_, err = sentinel.Once(ctxT(t), c, "pay-2", func(context.Context) (int, error) { ran = true; return 1, nil })
	require.NoError(t, err)
	require.True(t, ran)
}
