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
)

// downableClient is a client, in a schema of its own (namespace ns; ""
// the default), whose pool's new connections are refused while down is
// set, as when the database is unreachable; the shared server is not
// touched. Close p's idle connections (p.Reset) after setting down, so
// that every statement needs a new one.
func downableClient(t *testing.T, ns string) (*sentinel.Client, *pgxpool.Pool, *atomic.Bool) {
	t.Helper()
	_, schema := newClient(t)
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	down := new(atomic.Bool)
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
	c, err := sentinel.New(p, &sentinel.Config{Schema: schema, Namespace: ns})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, p, down
}
