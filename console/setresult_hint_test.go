package console_test

import (
	"context"
	"html"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// fn succeeded but its result could not be stored: every caller gets
// ErrResult, and only an operator can give the key a result. The key's
// page showed it completed, its result error, and no way on; it now
// prints the command that stores one, runnable as printed.
func TestKeyPageSaysHowToStoreAMissingResult(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	for _, key := range []string{"ratio-1", "-ratio-2"} {
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (float64, error) { return math.Inf(1), nil })
		require.Error(t, err)
		ex, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		require.Equal(t, sentinel.StateCompleted, ex.State)
		require.NotEmpty(t, ex.ResultError)

		s := server(t, c, console.Options{ReadOnly: true})
		code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {key}}.Encode())
		require.Equal(t, http.StatusOK, code, body)
		schema := c.Config().Schema
		want := "sentinel set-result " + key + " -n default --token " + strconv.FormatInt(ex.Token, 10) + " --schema " + schema
		if key[0] == '-' {
			want = "sentinel set-result -n default --token " + strconv.FormatInt(ex.Token, 10) + " --schema " + schema + " -- " + key
		}
		require.Contains(t, html.UnescapeString(body), "<code id=\"set-result-command\">"+want+"</code>", "no way on for a key every caller fails on")
	}
}
