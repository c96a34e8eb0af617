package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

var keyBadgeRE = regexp.MustCompile(`id="key-state"[^>]*><span class="([^"]*)"(?: title="([^"]*)")?>([^<]*)</span>`)

// A key's badge, as its page shows it (the "state" template), is the
// badge lease-state answers for it (what live.js draws once a lease
// expires): one text, one tooltip. The page's tooltip of an HTTP
// request's key rerun pending said "the next caller with WithRerun runs
// the next attempt", the words for a Once key, beside a note (and a
// lease-state answer) saying that the client's repeat of the request
// runs it; its Attempt row named WithRerun, which the middleware's user
// never calls (idempotency.Options.Rerun).
func TestKeyPageBadgeIsLeaseStateBadge(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	fail := func(context.Context) (int, error) { return 0, errors.New("card network timed out") }
	httpKey := idempotency.ExecutionKey("cus_1", "k-young")
	for _, k := range []string{"once-rerun", httpKey} {
		_, err := sentinel.Once(ctx, c, k, fail, sentinel.WithRerun(3))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	uncertain(t, c, "unc")
	_, err := sentinel.Once(ctx, c, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	for _, k := range []string{"once-rerun", httpKey, "unc", "done"} {
		q := url.Values{"ns": {"default"}, "key": {k}}.Encode()
		code, body := get(t, s.URL+"/ops/key?"+q)
		require.Equal(t, http.StatusOK, code, body)
		m := keyBadgeRE.FindStringSubmatch(body)
		require.NotNil(t, m, body)
		code, js := get(t, s.URL+"/ops/lease-state?"+q)
		require.Equal(t, http.StatusOK, code, js)
		var st struct {
			Badge struct{ Class, Text, Title string } `json:"badge"`
		}
		require.NoError(t, json.Unmarshal([]byte(js), &st))
		require.Equal(t, st.Badge.Class, m[1], k)
		require.Equal(t, st.Badge.Title, html.UnescapeString(m[2]), k)
		require.Equal(t, st.Badge.Text, html.UnescapeString(m[3]), k)
		if k == httpKey {
			// Its attempts are the middleware's Options.Rerun, not WithRerun.
			require.Contains(t, body, "1 of at most 3 <small>(the middleware's Options.Rerun)</small>")
		}
	}
}
