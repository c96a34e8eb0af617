package console_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An action whose database could not be reached failed with "Failed" and
// the driver's error alone: nothing said whether the key was changed, nor
// what to do. An operator who saw "Failed" on a force-complete does not
// know whether to type it again, or whether callers already get the
// value. The page now says the action may or may not have been done, to
// look at the key's page once the database answers, and that doing it
// again is safe (guarded by the token seen).
func TestActDatabaseUnreachableSaysWhatToDo(t *testing.T) {
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
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema, Namespace: "payments"})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	form := confirmForm(t, s.URL, "reconcile", "payments", "pay-1", ex.Token)

	down.Store(true)
	p.Reset() // the database is gone: no connection, none to be made
	code, body := post(t, s.URL, form)
	require.GreaterOrEqual(t, code, 500, body)
	require.Contains(t, body, "may or may not have been done", body)
	require.Contains(t, body, "open the key&#39;s page", body)
	require.Contains(t, body, "safe", body)
	require.Contains(t, body, `href="key?key=pay-1&amp;ns=payments"`, "back to the key")

	down.Store(false)
	now, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
}
