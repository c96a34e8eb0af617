package console_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A key's page reads its newest events and its last run, not its whole
// history: with more events than it shows, it says so and names the
// command that lists them all, and the refused completion's evidence stays
// on the page (and usable) when callers turned away since pushed it out of
// the newest events.
func TestKeyPageBoundsTheHistoryAndKeepsTheEvidence(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	refusedOnce(t, c, "charge", map[string]any{"id": "ch_9"}, nil)
	ex, err := c.Reconcile(ctx, "charge")
	require.NoError(t, err)
	// 300 callers turned away since (Config.RecordRejections' records).
	_, err = admin.Exec(ctx, "INSERT INTO "+pgx.Identifier{schema, "events"}.Sanitize()+
		" (namespace, key, event, state, token, owner) SELECT 'default', 'charge', 'rejected', 'reconciling', $1, 'caller'"+
		" FROM pg_catalog.generate_series(1, 300)", ex.Token)
	require.NoError(t, err)

	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/key?ns=default&key=charge")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, 200, strings.Count(body, `<tr class="ev-`), "the newest 200 events")
	require.True(t, strings.Contains(body, `id="history-older"`), "the note that older events are not shown")
	require.True(t, strings.Contains(body, "<code>sentinel history charge -n default --schema "+schema+"</code>"),
		"the command that lists the whole history")
	require.True(t, strings.Contains(body, `<pre class="refused-result">`) && strings.Contains(body, "ch_9"), "the evidence is shown")
	m := regexp.MustCompile(`id="use-refused-\d+" href="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "the evidence can be used")
	u, err := url.Parse(html.UnescapeString(m[1]))
	require.NoError(t, err)
	code, body = get(t, s.URL+"/ops/confirm?"+u.RawQuery)
	require.Equal(t, http.StatusOK, code)
	require.False(t, strings.Contains(body, "holds no JSON result"), "the confirmation finds the evidence")
	require.True(t, strings.Contains(body, "ch_9"), "the confirmation holds the evidence's value")

	// A key with a short history shows all of it, without the note.
	_, err = sentinel.Once(ctx, c, "short", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	_, body = get(t, s.URL+"/ops/key?ns=default&key=short")
	require.Equal(t, 3, strings.Count(body, `<tr class="ev-`))
	require.False(t, strings.Contains(body, `id="history-older"`), "no note for a short history")
}
