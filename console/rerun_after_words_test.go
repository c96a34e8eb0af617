package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A read-only console started with --rerun-pending-after 10m said, on
// the page of a key rerun pending for 12 minutes, "more than 10m0s ago",
// and printed "sentinel idempotency inspect --rerun-pending-after 10m0s
// KEY ..." for an HTTP request's key, where the start page, its counts and
// every sentinel command say 10m and put the flag after the key. The
// page now says 10m, as typed, in both places.
func TestKeyPageRerunAfterAsTyped(t *testing.T) {
	c, schema := newClient(t)
	rerunPending(t, c, "mail", "receipt-old")
	httpKey := idempotency.ExecutionKey("cus 1's $HOME", "k-old")
	rerunPending(t, c, "pay ments", httpKey)
	ageExecutions(t, schema, 12*time.Minute)
	s := server(t, c, console.Options{ReadOnly: true, RerunPendingAfter: 10 * time.Minute})

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"mail"}, "key": {"receipt-old"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "more than 10m ago")
	require.NotContains(t, body, "10m0s")

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"pay ments"}, "key": {httpKey}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "10m0s")
	require.Contains(t, body, "sentinel idempotency inspect k-old --scope &#39;cus 1&#39;\\&#39;&#39;s $HOME&#39; -n &#39;pay ments&#39; --rerun-pending-after 10m --schema "+schema)
}

// The page of an HTTP request's key rerun pending too long said "no
// caller with WithRerun came back ... then reconcile", where sentinel
// status, idempotency list and idempotency inspect say no repeat of the
// request came back, and the page's own next step is to resolve it with a
// response. It now says it as they do.
func TestHTTPKeyPageStaleSaysRepeat(t *testing.T) {
	c, schema := newClient(t)
	httpKey := idempotency.ExecutionKey("cus 1", "k-old")
	rerunPending(t, c, "pay", httpKey)
	ageExecutions(t, schema, 20*time.Minute)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"pay"}, "key": {httpKey}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "more than 15m ago, and no repeat of the request came back to run attempt 2 of 3")
	require.NotContains(t, body, "no caller with WithRerun came back")
}
