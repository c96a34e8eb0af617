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

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// The page of an HTTP request's key rerun pending too long (the
// middleware's Options.Rerun; no repeat of the request came back) says to
// resolve it with the response its retries get, as sentinel idempotency
// inspect does (which prints idempotency resolve). The console offered
// only Reconcile, and its resolve form, opened by hand, warned that the
// key had moved on. It now offers "Resolve with a response" for it, as
// for an uncertain HTTP key; resolving reconciles, then completes with
// the response, which the client's repeat gets replayed.
func TestHTTPKeyRerunStaleResolves(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	var runs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("charged, then crashed")
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.Middleware(c, idempotency.Options{Rerun: 3, Scope: func(r *http.Request) string { return r.Header.Get("X-Account") }})
	api := httptest.NewUnstartedServer(mw(h))
	api.Config.ErrorLog = log.New(io.Discard, "", 0)
	api.Start()
	t.Cleanup(api.Close)
	send := func() (int, string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "POST", api.URL+"/charges", strings.NewReader(`{"amount":4200}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "pay-9")
		req.Header.Set("X-Account", "acct_42")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
	}
	send()
	execKey := idempotency.ExecutionKey("acct_42", "pay-9")
	ex, err := c.Inspect(ctx, execKey)
	require.NoError(t, err)
	require.True(t, ex.Rerunnable(), "%+v", ex)
	ageExecutions(t, schema, 20*time.Minute)
	s := server(t, c, console.Options{OperatorToken: opToken})

	keyPage := s.URL + "/ops/key?" + url.Values{"ns": {"default"}, "key": {execKey}}.Encode()
	code, body := get(t, keyPage)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "no repeat of the request came back")
	require.Contains(t, body, "Resolve with a response", "the page says to resolve it: it offers to")
	require.Contains(t, body, "confirm?action=resolve&amp;")

	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"resolve"}, "ns": {"default"}, "key": {execKey}, "token": {"1"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="moved"`, body)

	form := confirmForm(t, s.URL, "resolve", "default", execKey, ex.Token)
	form.Set("status", "201")
	form.Set("headers", "Content-Type: application/json")
	form.Set("body", `{"charge_id":"ch_9"}`)
	code, body = post(t, s.URL, form, "Origin", s.URL)
	require.Equal(t, http.StatusOK, code, body)
	ex, err = c.Inspect(ctx, execKey)
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, ex.State)
	status, replayed, got := send()
	require.Equal(t, 201, status)
	require.Equal(t, "true", replayed)
	require.Equal(t, `{"charge_id":"ch_9"}`, got)
	require.EqualValues(t, 1, runs.Load(), "no repeat re-ran the handler")
}
