package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An HTTP key's page shows the stored response's trailer fields, which
// every replay sends after the body; it showed the header and body only.
func TestHTTPKeyPageShowsTrailers(t *testing.T) {
	c, _ := newClient(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, "paid")
		w.Header().Set("X-Checksum", "abc")
	})
	app := httptest.NewServer(idempotency.Middleware(c, idempotency.Options{Scope: idempotency.SingleTenant})(h))
	t.Cleanup(app.Close)
	req, err := http.NewRequestWithContext(ctxT(t), "POST", app.URL+"/charges", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set(idempotency.HeaderKey, "k-1")
	resp, err := app.Client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {idempotency.ExecutionKey("", "k-1")}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "trailer X-Checksum: abc")
}
