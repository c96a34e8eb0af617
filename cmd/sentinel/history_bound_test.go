package main

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// rejectMany records n callers turned away on every execution of e's schema
// (what Config.RecordRejections writes for each), after everything else.
func (e *env) rejectMany(n int) {
	e.t.Helper()
	s := pgx.Identifier{e.schema}.Sanitize()
	_, err := admin.Exec(ctxT(e.t), "INSERT INTO "+s+".events (namespace, key, event, state, token, owner)"+
		" SELECT x.namespace, x.key, 'rejected', x.state, x.token, 'caller' FROM "+s+".executions x,"+
		" pg_catalog.generate_series(1, $1) AS g", n)
	require.NoError(e.t, err)
}

// history --limit N lists the newest N events and says when there are
// older ones; --last-run lists the key's latest run, however many callers
// were turned away since.
func TestHistoryLimitListsTheNewest(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "charge-9", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	e.rejectMany(500)

	r := e.run("history", "charge-9", "--limit", "3")
	requireCode(t, r, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout) // the header and the newest three
	for _, l := range lines[1:] {
		require.Contains(t, l, "rejected")
	}
	require.Contains(t, r.stderr, "earlier events not shown (--limit 3; --limit 0 shows all)")
	r = e.run("history", "charge-9", "--limit", "503")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "not shown", "503 is all of it: claimed, started, completed and 500")
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 504)

	// --last-run: the run the rejections bury.
	r = e.run("history", "charge-9", "--last-run")
	requireCode(t, r, exitOK)
	lines = strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	for i, ev := range []string{"claimed", "started", "completed"} {
		require.Contains(t, lines[i+1], ev)
	}
	r = e.run("history", "charge-9", "--last-run", "--json")
	requireCode(t, r, exitOK)
	require.Equal(t, 3, strings.Count(r.stdout, `"type"`), r.stdout)
	requireCode(t, e.run("history", "charge-9", "--last-run", "--limit", "2"), exitUsage)
	requireCode(t, e.run("history", "nope", "--last-run"), exitNotFound)
}

// The console's key page, when it shows only a key's newest events, names
// the command that lists them all: run as printed, it does.
func TestConsoleHistoryCommandRunsAsPrinted(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	c := e.newClient("payments")
	_, err := sentinel.Once(ctxT(t), c, "-refund 7", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	e.rejectMany(250)
	h, err := console.New(e.client, console.Options{ReadOnly: true})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/key?ns=payments&key=" + "-refund%207")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m := regexp.MustCompile(`id="history-older">[^<]*<code>([^<]+)</code>`).FindSubmatch(b)
	require.NotNil(t, m, "the page names the command")
	line := html.UnescapeString(string(m[1]))
	require.Equal(t, "sentinel history -n payments --schema "+e.schema+" -- '-refund 7'", line)
	r := runPrinted(t, line, "")
	requireCode(t, r, exitOK)
	require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 1+3+250, "the header and every event")
}
