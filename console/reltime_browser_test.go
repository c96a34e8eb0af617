package console_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/internal/reltime"
)

// The console wrote "12s from now" and "just now" where the command wrote
// "in 12.4s" and "0s ago", and "1m05s" where it wrote "1m5s": two
// wordings of one lease's expiry. The pages now write internal/reltime's
// wording, as the command does, and live.js, which counts the times on in
// the browser, writes the same for every case (its function ago, run in a
// real browser against reltime.Millis).
func TestBrowserRelativeTimesWordedAsTheCommand(t *testing.T) {
	c, _ := newClient(t)
	holdOnce(t, c, "charge-1", 30*time.Second)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	code, body := get(t, s.URL+"/ops/key?ns=default&key=charge-1")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "from now")
	require.Regexp(t, `class="age" data-t="[^"]+">in \d\ds<`, body, "the lease's expiry, as the command words it")

	if chromePath() == "" {
		return
	}
	resp, err := http.Get(s.URL + "/ops/static/live.js")
	require.NoError(t, err)
	js, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	fn := regexp.MustCompile(`(?s)// reltime:begin\n(.*)// reltime:end`).FindSubmatch(js)
	require.NotNil(t, fn, "live.js has no function ago between its reltime markers")
	var cases []int64
	for _, ms := range []int64{0, 50, 99, 100, 990, 1000, 3100, 9999, 10000, 42500, 59999, 60000, 65000, 3599999, 3600000,
		7380000, 47*3600000 + 59*60000, 48 * 3600000, 75 * 3600000} {
		cases = append(cases, ms, -ms)
	}
	var got []string
	bctx := browser(t)
	require.NoError(t, chromedp.Run(bctx, chromedp.Navigate("about:blank"),
		chromedp.Evaluate(`(function () { `+string(fn[1])+` return `+int64s(cases)+`.map(ago); })()`, &got)))
	require.Len(t, got, len(cases))
	for i, ms := range cases {
		require.Equal(t, reltime.Millis(ms), got[i], "live.js writes %d ms before now otherwise than the command", ms)
	}
}

func int64s(v []int64) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = itoa(int(n))
	}
	return "[" + strings.Join(s, ",") + "]"
}
