package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// The start page's Uncertain section told the operator to "reconcile
// each one" with an HTTP request's key among its rows, which is resolved
// with the response its retries get (its key page and sentinel status
// say so): the section now says it for such keys, and only when it lists
// one.
func TestStartPageSaysHTTPKeysAreResolved(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "order-1")
	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "resolved with the response its retries get", body)

	uncertain(t, c, idempotency.ExecutionKey("cus_1", "k-1"))
	code, body = get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	i := strings.Index(body, "reconcile each one")
	require.Positive(t, i, body)
	require.Contains(t, body[i:], "resolved with the response its retries get", body)
}
