package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A key page left open showed a claimed key's hard expiry; when its lease
// expired, the live view marked the key "handed back, safe to retry" (as
// a reload would) but kept the Hard expiry row as read, a time that
// bounds nothing now: a reload shows "none (nothing holds the key; T was
// the previous holder's)". The live view now redraws that row as a reload
// does, from lease-state's hard_past. In a real browser.
func TestBrowserHandedBackRedrawsHardExpiry(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, schema := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	_, err := c.Reconcile(ctx, "k")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctx, "k"))
	// Claimed with a live lease, as a caller that claimed it and then
	// stopped leaves it; the lease ends once the page showed it held (a
	// lease of a few seconds could end before a loaded machine's browser
	// drew the page: CI saw it).
	table := pgx.Identifier{schema, "executions"}.Sanitize()
	_, err = admin.Exec(ctx, "UPDATE "+table+` SET lease_expires_at = pg_catalog.now() + interval '5 minutes',
		hard_expires_at = pg_catalog.now() + interval '1 hour' WHERE key = 'k'`)
	require.NoError(t, err)
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	require.True(t, ex.LeaseAlive)
	hard := ex.HardExpiresAt.UTC().Format("2006-01-02 15:04:05.000Z")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	keyURL := s.URL + "/ops/key?" + url.Values{"ns": {"default"}, "key": {"k"}}.Encode()

	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate(keyURL), chromedp.WaitVisible(`#key-hard`, chromedp.ByID)))
	text, ok := waitText(t, bctx, "key-hard", 5*time.Second, func(s string) bool { return s != "" })
	require.True(t, ok)
	require.Equal(t, hard, text, "held: its hard expiry")
	_, err = admin.Exec(ctx, "UPDATE "+table+` SET lease_expires_at = pg_catalog.clock_timestamp() WHERE key = 'k'`)
	require.NoError(t, err)

	state, ok := waitText(t, bctx, "key-state", 30*time.Second, func(s string) bool { return strings.HasPrefix(s, "handed back") })
	require.True(t, ok, "not marked handed back: %q", state)
	text, _ = waitText(t, bctx, "key-hard", 5*time.Second, func(s string) bool { return strings.HasPrefix(s, "none") })

	// As a reload shows it.
	code, body := get(t, keyURL)
	require.Equal(t, http.StatusOK, code, body)
	want := "none (nothing holds the key; " + hard + " was the previous holder's)"
	require.Contains(t, body, `<td id="key-hard">none <small>(nothing holds the key; `+hard+` was the previous holder's)</small>`)
	require.Equal(t, want, text)
	var small string
	require.NoError(t, chromedp.Run(bctx, chromedp.Text(`#key-hard small`, &small, chromedp.ByQuery)))
	require.Equal(t, "(nothing holds the key; "+hard+" was the previous holder's)", small)
}
