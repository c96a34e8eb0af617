package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A reconciling key needs an operator as much as an uncertain one (its
// callers get ErrReconciling until one finishes): the header of every page
// counts it, with a link to it, as it counts the uncertain ones.
func TestHeaderCountsReconcilingKeys(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "pay-1", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true})
	for _, path := range []string{"/ops/leases", "/ops/elections"} {
		code, body := get(t, s.URL+path)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="reconciling-counts"`, "%s: the header did not count the reconciling key", path)
		require.Contains(t, body, `href="./?ns=default&amp;state=reconciling" data-reconciling-ns="default">default: 1</a>`, path)
	}
}
