package console_test

import (
	"context"
	"math"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A completed key whose result was not stored (every caller gets
// ErrResult until an operator stores it) needs an operator, but "Needs an
// operator" listed only uncertain and reconciling keys, and the header
// counted neither it nor its namespace. It is now a section of that tab
// (and a tab of its own), badged, and counted in every page's header.
func TestResultLostNeedsAnOperator(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, "pay-nan", func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	_, err = sentinel.Once(ctx, c, "pay-ok", func(context.Context) (float64, error) { return 1, nil })
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Result not stored")
	require.Contains(t, body, "pay-nan")
	require.NotContains(t, body, "pay-ok")
	require.Contains(t, body, "completed, result not stored")
	require.Contains(t, body, `href="./?ns=default&amp;state=result-lost" data-result-lost-ns="default">default: 1</a>`)

	code, body = get(t, s.URL+"/ops/?state=result-lost")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "pay-nan")
	require.NotContains(t, body, "pay-ok")

	code, body = get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="result-lost-counts"`, "every page's header counts it")

	ex, err := c.Inspect(ctx, "pay-nan")
	require.NoError(t, err)
	require.NoError(t, c.SetResult(ctx, "pay-nan", 2.5, sentinel.WithToken(ex.Token)))
	_, body = get(t, s.URL+"/ops/")
	require.NotContains(t, body, "pay-nan", "stored: nothing left to do")
	require.NotContains(t, body, `id="result-lost-counts"`)
}
