package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// liveEvents reads the execution events of the live stream at path, as
// live.js gets them, up to the first of key last.
func liveEvents(t *testing.T, base, path, last string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ops/"+path, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var out []map[string]any
	sc := bufio.NewScanner(resp.Body)
	var evType string // the event: line of the event read; "execution" for execution events
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			evType = v
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && evType == "execution" {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(data), &m))
			out = append(out, m)
			if m["key"] == last {
				return out
			}
		}
	}
	t.Fatalf("the stream ended before an event of %q: %v", last, out)
	return nil
}

// The live view follows from the head read before the page, so a change
// made while the page is read is not missed; but the page may show it
// already, and the banner counted it as a change since the page was
// loaded (one too many for each such change). The head read after the
// page ("read") tells them apart: a change made between the two heads is
// marked while_read, one made after is not.
func TestLiveMarksChangesMadeWhileThePageWasRead(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 20 * time.Millisecond})
	before, err := c.FollowHead(ctxT(t))
	require.NoError(t, err)
	uncertain(t, c, "during-read") // made while the page was read
	after, err := c.FollowHead(ctxT(t))
	require.NoError(t, err)
	require.NotEqual(t, before, after)
	uncertain(t, c, "after-read") // made after

	evs := liveEvents(t, s.URL, "events?"+url.Values{"after": {before}, "read": {after}}.Encode(), "after-read")
	require.Equal(t, "during-read", evs[0]["key"], "%v", evs)
	for _, ev := range evs {
		w, _ := ev["while_read"].(bool)
		switch ev["key"] {
		case "during-read":
			require.True(t, w, "a change made while the page was read is not marked: %v", ev)
		default:
			require.False(t, w, "a change made after the page was read is marked: %v", ev)
		}
	}

	// A quiet page (no change while it was read) needs no "read".
	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code)
	m := liveRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	require.NotContains(t, m[1], "read=")
	require.Contains(t, m[1], "after=")

	// A bad "read" is refused before the stream starts.
	code, _ = get(t, s.URL+"/ops/events?read=x")
	require.Equal(t, http.StatusBadRequest, code)
}
