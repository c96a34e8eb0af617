package console_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// During an outage the pages showed the driver's text alone ("Uncertain
// keys could not be counted: ... connection refused"; the lists only the
// error paragraph), with no word that the database does not answer nor of
// what to do. They now say so plainly, with a link that reloads, the
// driver's text kept as a detail, and answer 503.
func TestPagesSayDatabaseDoesNotAnswer(t *testing.T) {
	_, schema := newClient(t)
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	var down atomic.Bool
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if down.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused")}
		}
		return dial(ctx, network, addr)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema})
	require.NoError(t, err)
	t.Cleanup(c.Close)
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
	}
}
