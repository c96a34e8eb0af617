package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// Issue 26.4: a cursor past the bounds Follow accepts, from ?after= or
// Last-Event-ID, gets 400 with the reason; a valid one gets the stream.
func TestEventsStreamRefusesAForgedCursor(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 20 * time.Millisecond})
	forged := "3000000:1-" + strconv.Itoa(sentinel.MaxFollowCursorIDs+1)
	open := func(after, lastID string) (int, string, string) {
		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		defer cancel()
		u := s.URL + "/ops/events?ns=default"
		if after != "" {
			u += "&after=" + url.QueryEscape(after)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		require.NoError(t, err)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(buf[:n])
	}
	for _, tc := range [][2]string{{forged, ""}, {"", forged}, {"12:x", ""}} {
		code, _, body := open(tc[0], tc[1])
		require.Equal(t, http.StatusBadRequest, code, "after %q, Last-Event-ID %q: %s", tc[0], tc[1], body)
		require.True(t, strings.Contains(body, "Cursor"), body)
	}
	code, ctype, body := open("3000000:1-1000", "")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "text/event-stream", ctype)
}
