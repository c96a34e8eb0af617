package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

var valueRE = regexp.MustCompile(`(?s)<textarea name="value" id="value"[^>]*>(.*?)</textarea>`)

// fn returned a string that reads as JSON ("null", "42") and its
// completion was refused. The key's page offered it in one click as the
// JSON value null / 42, not as the string: force-completed so, a caller
// of Once[string] got "" (Cached, nil error) for "null". The page offers
// fn's string as a string.
func TestRefusedStringResultOfferedAsString(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	for _, want := range []string{"null", "42", `{"id":"ch_1"}`} {
		key := "ref-" + want
		refusedOnce(t, c, key, want, nil)
		ex, err := c.Reconcile(ctx, key)
		require.NoError(t, err)
		hist, err := c.History(ctx, key)
		require.NoError(t, err)
		var refused int64
		for _, ev := range hist {
			if ev.Type == "completion_refused" {
				refused = ev.ID
			}
		}
		require.NotZero(t, refused, "a completion_refused event")

		s := server(t, c, console.Options{OperatorToken: opToken})
		code, body := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {key},
			"token": {strconv.FormatInt(ex.Token, 10)}, "evidence": {strconv.FormatInt(refused, 10)}}.Encode())
		require.Equal(t, http.StatusOK, code, body)
		m := valueRE.FindStringSubmatch(body)
		require.NotNil(t, m, body)
		value := html.UnescapeString(m[1])
		require.Equal(t, strconv.Quote(want), value, "fn returned the string %q; the form proposes another value", want)

		f := confirmForm(t, s.URL, "force_complete", "default", key, ex.Token)
		f.Set("value", value)
		f.Set("evidence", strconv.FormatInt(refused, 10))
		code, body = post(t, s.URL, f)
		require.Equal(t, http.StatusOK, code, body)
		res, err := sentinel.Once(ctx, c, key, func(context.Context) (string, error) { return "ran again", nil })
		require.NoError(t, err)
		require.True(t, res.Cached)
		require.Equal(t, want, res.Value)
	}
}
