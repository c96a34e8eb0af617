package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

var liveRE = regexp.MustCompile(`data-live="([^"]+)"`)

// firstLiveKey opens the page's live stream (its data-live URL, as
// live.js does) and returns the key and SSE id of the first execution
// event, "" when none comes within a few seconds.
func firstLiveKey(t *testing.T, base, live string, hdr ...string) (key, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ops/"+live, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var evType string // the event: line of the event read; "execution" for execution events
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			id = v
		}
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			evType = v
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && evType == "execution" {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			return m["key"].(string), id
		}
	}
	return "", ""
}

// A change made after a page was rendered and before its live view
// connected is announced: the page is stale and the operator is told so.
func TestLiveViewCoversChangesSinceRender(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 20 * time.Millisecond})
	uncertain(t, c, "seen-key")

	for _, path := range []string{"", "key?" + url.Values{"ns": {"default"}, "key": {"seen-key"}}.Encode()} {
		code, body := get(t, s.URL+"/ops/"+path)
		require.Equal(t, http.StatusOK, code, body)
		m := liveRE.FindStringSubmatch(body)
		require.NotNil(t, m, body)
		live := html.UnescapeString(m[1])
		// Meanwhile (the page on its way to the browser, the script not
		// yet connected), another operator reconciles the key.
		ex, err := c.Inspect(ctxT(t), "seen-key")
		require.NoError(t, err)
		if ex.State == sentinel.StateExecuting {
			_, err = c.Reconcile(ctxT(t), "seen-key")
		} else {
			err = c.ResetToClaimed(ctxT(t), "seen-key")
		}
		require.NoError(t, err)
		key, id := firstLiveKey(t, s.URL, live)
		require.Equal(t, "seen-key", key,
			"page %q: a change made after it was rendered never reached its live view (%s)", path, live)
		// The browser reconnects with Last-Event-ID: what it showed is not
		// shown again.
		key, _ = firstLiveKey(t, s.URL, live, "Last-Event-ID", id)
		require.Empty(t, key, "page %q: a reconnection delivered again an event already shown", path)
	}
}
