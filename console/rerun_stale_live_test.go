package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// attentionEvents reads the live stream's attention events (the counts
// live.js compares with the page's), passing each one's counts to more
// until it returns false.
func attentionEvents(t *testing.T, base string, more func(counts map[string]map[string]float64) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctxT(t), 60*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/ops/events?all=1", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var evType string
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			evType = v
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && evType == "attention" {
			var a struct {
				Counts map[string]map[string]float64 `json:"counts"`
			}
			require.NoError(t, json.Unmarshal([]byte(data), &a))
			if !more(a.Counts) {
				return
			}
		}
	}
	t.Fatalf("the stream ended: %v", sc.Err())
}

// A key rerun pending goes stale (needs an operator) when its lease
// ended more than Options.RerunPendingAfter ago: nothing writes an event
// then. The live view's count check sent the uncertain, reconciling and
// result-lost counts only, so a page left open never said that a key had
// gone stale meanwhile. The attention events now carry the counts of keys
// rerun pending too long (rerun_stale), read as the page's top reads them.
func TestLiveAttentionCountsRerunStale(t *testing.T) {
	c, schema := newClient(t)
	rerunPending(t, c, "mail", "receipt")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	table := pgx.Identifier{schema, "executions"}.Sanitize()
	n := 0
	attentionEvents(t, s.URL, func(counts map[string]map[string]float64) bool {
		n++
		if n == 1 {
			require.Contains(t, counts, "rerun_stale", "the first counts say none is stale: %v", counts)
			require.Empty(t, counts["rerun_stale"], "its lease ended just now")
			// It goes stale, as 20 minutes without a caller would leave it.
			_, err := admin.Exec(ctxT(t), "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
				lease_expires_at = lease_expires_at - interval '20 minutes' WHERE key = 'receipt'`)
			require.NoError(t, err)
			return true
		}
		require.Equal(t, map[string]float64{"mail": 1}, counts["rerun_stale"], "counts %v", counts)
		return false
	})
}
