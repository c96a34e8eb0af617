package console_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// chargeAPI is POST /charges behind the idempotency middleware on a real
// server; its first run charges and panics.
type chargeAPI struct {
	url     string
	charges atomic.Int64
}

func newChargeAPI(t *testing.T, c *sentinel.Client) *chargeAPI {
	api := &chargeAPI{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if api.charges.Add(1) == 1 {
			panic("charged, then crashed")
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.Middleware(c, idempotency.Options{Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	s := httptest.NewUnstartedServer(mw(h))
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Start()
	t.Cleanup(s.Close)
	api.url = s.URL
	return api
}

// post sends the charge and returns status, Idempotent-Replayed and body.
func (api *chargeAPI) post(t *testing.T, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t), "POST", api.url+"/charges", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Account", "acct_42")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
}

// Issue 18.2 and 18.3 on the page: an HTTP key shows its request and is
// resolved with a response; the generic force-complete refuses a bare
// value for it.
func TestHTTPKeyResolve(t *testing.T) {
	c, _ := newClient(t)
	api := newChargeAPI(t, c)
	s := server(t, c, console.Options{OperatorToken: opToken})
	api.post(t, "pay-1", `{"amount":4200}`)
	execKey := idempotency.ExecutionKey("acct_42", "pay-1")
	ex, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {execKey}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "POST /charges")
	require.Contains(t, body, `id="http-key-value">pay-1<`)
	require.Contains(t, body, "Resolve with a response")
	require.NotContains(t, body, "Force-complete")

	// Reconcile, then the generic force-complete with a bare value.
	form := confirmForm(t, s.URL, "reconcile", "default", execKey, ex.Token)
	code, body = post(t, s.URL, form, "Origin", s.URL)
	require.Equal(t, http.StatusOK, code, body)
	ex, err = c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {execKey}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Resolve with a response")
	require.Contains(t, body, "Reset to claimed")
	require.NotContains(t, body, "Force-complete", "a reconciling HTTP key is resolved with a response, not a value")
	form = confirmForm(t, s.URL, "force_complete", "default", execKey, ex.Token)
	form.Set("value", `{"charge_id":"ch_1"}`)
	code, body = post(t, s.URL, form, "Origin", s.URL)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "resolve it with an HTTP response")
	require.Contains(t, body, `href="confirm?action=resolve&amp;`, "the way back leads to the resolve form")

	// Resolve with a response.
	form = confirmForm(t, s.URL, "resolve", "default", execKey, ex.Token)
	form.Set("status", "201")
	form.Set("headers", "Content-Type: application/json\r\nSet-Cookie: s=1")
	form.Set("body", `{"charge_id":"ch_1"}`)
	code, body = post(t, s.URL, form, "Origin", s.URL)
	require.Equal(t, http.StatusOK, code, body)
	status, replayed, got := api.post(t, "pay-1", `{"amount":4200}`)
	require.Equal(t, 201, status)
	require.Equal(t, "true", replayed)
	require.Equal(t, `{"charge_id":"ch_1"}`, got)
	require.EqualValues(t, 1, api.charges.Load())

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {execKey}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Stored response")
	require.Contains(t, body, "201 Created")
	require.NotContains(t, body, "Set-Cookie")
}

// The page's flow in a real browser: the operator opens the uncertain HTTP
// key, sees its request, resolves it with a response in one step (the
// page reconciles first), and the client's retry gets that response.
func TestBrowserResolveHTTPKey(t *testing.T) {
	if chromePath() == "" {
		t.Skip("no Chromium binary found (install the Debian package chromium, or set SENTINEL_CHROME): skipping the browser test")
	}
	c, _ := newClient(t)
	api := newChargeAPI(t, c)
	h, err := console.New(c, console.Options{OperatorToken: opToken, PollInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	ctx := browser(t)

	api.post(t, "8e03978e", `{"amount":4200}`)
	execKey := idempotency.ExecutionKey("acct_42", "8e03978e")
	first, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	require.NoError(t, chromedp.Run(ctx, chromedp.Navigate(s.URL+"/")))
	openKey(t, ctx, execKey)
	var request, clientKey string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Text(`#http-request`, &request, chromedp.ByID),
		chromedp.Text(`#http-key-value`, &clientKey, chromedp.ByID)))
	require.Equal(t, "POST /charges", strings.TrimSpace(request))
	require.Equal(t, "8e03978e", clientKey)
	shot(t, ctx, "http-key-uncertain")

	clickLink(t, ctx, "Resolve with a response", "#confirm-button")
	var shown string
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Text(`#resolve-request`, &shown, chromedp.ByID),
		chromedp.SetValue(`#status`, "201", chromedp.ByID),
		chromedp.SetValue(`#headers`, "Content-Type: application/json", chromedp.ByID),
		chromedp.SetValue(`#body`, `{"charge_id":"ch_97ea3056"}`, chromedp.ByID)))
	require.Equal(t, "POST /charges", shown)
	heading, text := confirmAs(t, ctx, "Ada Lovelace", opToken, "")
	require.Contains(t, heading, "done", text)

	ex, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	require.Greater(t, ex.Token, first.Token)
	status, replayed, body := api.post(t, "8e03978e", `{"amount":4200}`)
	require.Equal(t, 201, status)
	require.Equal(t, "true", replayed)
	require.Equal(t, `{"charge_id":"ch_97ea3056"}`, body)
	require.EqualValues(t, 1, api.charges.Load(), "the retry charged again")

	clickLink(t, ctx, "← Back", "#key-name")
	var stored string
	require.NoError(t, chromedp.Run(ctx, chromedp.Text(`pre.http-response`, &stored, chromedp.ByQuery)))
	require.Contains(t, stored, "201 Created")
	require.Contains(t, stored, "ch_97ea3056")
	shot(t, ctx, "http-key-resolved")
}
