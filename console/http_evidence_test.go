package console_test

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An HTTP key whose handler finished after its lease was lost: its page
// shows the refused response and the way on (resolve, prefilled with it).
// The refused-completions card told the operator of a reconciling HTTP
// key to "reconcile the key first; then this result can be used in one
// click", which never comes for an HTTP key.
func TestHTTPKeyEvidenceSaysTheWayOn(t *testing.T) {
	c, _ := newClient(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		<-r.Context().Done()
		time.Sleep(time.Until(started.Add(800 * time.Millisecond)))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"charge_id":"ch_late"}`))
	})
	mw := idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant, TTL: 500 * time.Millisecond, HardTTL: 500 * time.Millisecond})
	api := httptest.NewUnstartedServer(mw(h))
	api.Config.ErrorLog = log.New(io.Discard, "", 0)
	api.Start()
	t.Cleanup(api.Close)
	req, err := http.NewRequest("POST", api.URL+"/charges", strings.NewReader(`{"amount":1}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "late-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	execKey := idempotency.ExecutionKey("", "late-1")
	ex, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	t.Logf("state %s, client got %d", ex.State, resp.StatusCode)
	if ex.State == sentinel.StateExecuting {
		_, err = c.Reconcile(ctxT(t), execKey)
		require.NoError(t, err)
	}
	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {execKey}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "ch_late")
	require.NotContains(t, body, "Reconcile the key first", "a reconciling HTTP key told to reconcile first")
	require.Contains(t, body, "Resolve with a response")
	// What the card says: the resolve form is prefilled with it.
	now, err := c.Inspect(ctxT(t), execKey)
	require.NoError(t, err)
	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"resolve"}, "ns": {"default"}, "key": {execKey},
		"token": {strconv.FormatInt(now.Token, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "ch_late")
}
