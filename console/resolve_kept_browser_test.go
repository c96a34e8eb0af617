package console_test

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A refused resolve form (a mistyped operator token, a header the form
// cannot send) led back to a form with the response proposed at first
// (201, Content-Type only, no body) and the reason and name empty: what
// the operator typed at 3 a.m. was gone, only force-complete's value was
// kept. The refusal now answers with the form, the status, headers, body,
// reason and name as typed (never the operator token), and none of it in
// any address of the browser's history. The form also says when
// the state it shows was read and, for a key with a lease, when that
// lease expires. In a real browser.
func TestBrowserRefusedResolveFormKeepsWhatWasTyped(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	api := newChargeAPI(t, c)
	api.post(t, "pay-1", `{"amount":4200}`) // the handler panics: uncertain
	execKey := idempotency.ExecutionKey("acct_42", "pay-1")
	ex := waitUncertain(t, c, execKey)
	h, err := console.New(c, console.Options{OperatorToken: opToken})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t)
	form := s.URL + "/confirm?" + url.Values{"action": {"resolve"}, "ns": {"default"}, "key": {execKey}, "token": {strconv.FormatInt(ex.Token, 10)}}.Encode()
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(form), chromedp.WaitVisible(`#confirm-button`, chromedp.ByID)))

	var readAt, lease string
	read := func(id string) string {
		var v string
		require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(`(() => { const e = document.getElementById(`+jsString(id)+`); return e ? e.innerText : ""; })()`, &v)))
		return v
	}
	readAt, lease = read("state-read-at"), read("state-lease")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z`, readAt)
	require.Contains(t, lease, "expired", "the lease of an uncertain key, as read: %q", lease)

	const (
		status  = "202"
		headers = "Content-Type: application/json\nX-Charge-Id: ch_97ea"
		body    = `{"charge_id": "ch_97ea", "note": "confirmed with the PSP at 03:12"}`
		reason  = "PSP dashboard shows ch_97ea captured"
		name    = "Ada Lovelace"
	)
	fill := func(token string) (string, string) {
		var heading, text string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.SetValue(`#status`, status, chromedp.ByID),
			chromedp.SetValue(`#headers`, headers, chromedp.ByID),
			chromedp.SetValue(`#body`, body, chromedp.ByID),
			chromedp.SetValue(`#operator`, name, chromedp.ByID),
			chromedp.SetValue(`#reason`, reason, chromedp.ByID),
			chromedp.SetValue(`#operator_token`, token, chromedp.ByID),
			chromedp.Tasks(submitted(`#confirm-button`)),
			chromedp.Text(`#message-heading`, &heading, chromedp.ByID),
			chromedp.Text(`#message-text`, &text, chromedp.ByID)))
		return heading, text
	}
	kept := func() map[string]string {
		got := map[string]string{}
		for _, id := range []string{"status", "headers", "body", "operator", "reason", "operator_token"} {
			var v string
			require.NoError(t, chromedp.Run(ctx, chromedp.Value(`#`+id, &v, chromedp.ByID)))
			got[id] = strings.ReplaceAll(v, "\r\n", "\n")
		}
		return got
	}
	want := map[string]string{"status": status, "headers": headers, "body": body, "operator": name, "reason": reason, "operator_token": ""}

	heading, text := fill("not-the-token")
	require.Contains(t, heading, "Refused")
	require.Contains(t, text, "Nothing was changed")
	formAgain(t, ctx)
	require.Equal(t, want, kept(), "back at the form after a wrong operator token")

	// A header the form cannot send: refused, and back to the form as typed.
	require.NoError(t, chromedp.Run(ctx, chromedp.WaitVisible(`#confirm-button`, chromedp.ByID)))
	var h2 string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.SetValue(`#status`, status, chromedp.ByID),
		chromedp.SetValue(`#headers`, "X-Bad(id): 1", chromedp.ByID),
		chromedp.SetValue(`#body`, body, chromedp.ByID),
		chromedp.SetValue(`#operator`, name, chromedp.ByID),
		chromedp.SetValue(`#reason`, reason, chromedp.ByID),
		chromedp.SetValue(`#operator_token`, opToken, chromedp.ByID),
		chromedp.Tasks(submitted(`#confirm-button`)),
		chromedp.Text(`#message-heading`, &h2, chromedp.ByID)))
	require.Contains(t, h2, "Bad response")
	formAgain(t, ctx)
	got := kept()
	require.Equal(t, "X-Bad(id): 1", got["headers"], "the header as typed, to correct")
	require.Equal(t, body, got["body"])
	require.Equal(t, reason, got["reason"])

	// What was typed is in no address the browser visited (its history,
	// what the console's and proxies' access logs see).
	var hist []string
	require.NoError(t, chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		_, entries, err := page.GetNavigationHistory().Do(ctx)
		for _, e := range entries {
			hist = append(hist, e.URL)
		}
		return err
	})))
	require.NotEmpty(t, hist)
	for _, u := range hist {
		for _, typed := range []string{"ch_97ea", "PSP", "Lovelace", "body=", "reason=", "operator="} {
			require.NotContains(t, u, typed, "an address in the browser's history carries what was typed: %q", u)
		}
	}

	// Corrected, it goes through.
	heading, _ = fill(opToken)
	require.Contains(t, heading, "done")
	st, replayed, got2 := api.post(t, "pay-1", `{"amount":4200}`)
	require.Equal(t, 202, st)
	require.Equal(t, "true", replayed)
	require.JSONEq(t, body, got2)
}
