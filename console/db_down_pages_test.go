package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// During an outage the pages showed the driver's text alone ("Uncertain
// keys could not be counted: ... connection refused"; the lists only the
// error paragraph), with no word that the database does not answer nor of
// what to do. They now say so plainly, with a link that reloads, the
// driver's text kept as a detail, and answer 503.
func TestPagesSayDatabaseDoesNotAnswer(t *testing.T) {
	c, p, down := downableClient(t, "")
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	down.Store(true)
	p.Reset()
	for _, path := range []string{"", "?state=all", "leases", "queues", "elections", "elections?group=g",
		"key?ns=default&key=pay-1", "confirm?action=reconcile&ns=default&key=pay-1&token=" + itoa(int(ex.Token))} {
		code, body := get(t, s.URL+"/ops/"+path)
		require.Equal(t, http.StatusServiceUnavailable, code, "page %q: %s", path, body)
		require.Contains(t, body, `id="db-down"`, "page %q says plainly the database does not answer: %s", path, body)
		require.Contains(t, body, "The database does not answer", "page %q", path)
		require.Contains(t, body, "Reload this page once it answers", "page %q", path)
		require.Contains(t, body, `<a href="" class="reload">Reload</a>`, "page %q: a link that reloads", path)
		require.Contains(t, body, "connection refused", "page %q keeps the driver's text as a detail", path)
		// The counts at the top say it too, not the driver's text alone.
		require.Contains(t, body, `id="counts-db-down"`, "page %q", path)
		require.NotContains(t, body, "Uncertain keys could not be counted: ", "page %q", path)
		require.Contains(t, body, `data-wait-db="1"`, "page %q waits for the database and reloads itself", path)
		require.Contains(t, body, `data-live="events`, "page %q has a stream to wait with", path)
	}
}
