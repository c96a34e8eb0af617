package sentinel

// This file: The LISTEN connection's settings and its wait for a notification (keepalive ping, idle timeout).

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The listener's own connection: how it is made and how it is checked.
//
// A LISTEN connection is idle between notifications, and an idle TCP
// connection whose path drops packets without a word (a partition, a
// server that lost power, a NAT or load balancer that forgot an idle flow)
// reports nothing: no error and no notification, until the kernel's
// keepalive probes give up (with Go's defaults, which pgx uses, about 150 s
// after the path died; behind a proxy that keeps its side of the
// connection alive, never). Meanwhile the listener would count itself
// healthy, so waiters would sleep until a holder's expiry instead of
// re-checking every Config.WaitRecheck, and after a failover it would stay
// on a server that is gone.
//
// So the listener pings its connection after listenIdle without a
// notification, and a ping gets listenPingTimeout: a connection that does
// not answer is closed and replaced, and waiters re-check meanwhile. A
// silent connection is detected within listenIdle + listenPingTimeout. The
// ping is the LISTEN statement again (a no-op for a session that listens
// already; it also keeps the session's query in pg_stat_activity saying
// what it is): one round trip every listenIdle on a quiet connection,
// nothing while notifications flow.
//
// Reconnecting, each host of a multi-host connection string gets at most
// listenConnectTimeout when the string sets no connect_timeout, so a host
// that drops packets (an old primary that vanished) does not keep the
// listener from the next one (the new primary).
//
// The other connections the library uses are the pool's: every statement
// the library sends on its own (renewals, releases on Close, the elector's
// campaign) carries a deadline, and a statement that hits its deadline
// closes its connection (pgx), so the pool replaces it.
const (
	listenIdle           = 2 * time.Second
	listenPingTimeout    = 3 * time.Second
	listenConnectTimeout = 5 * time.Second
)

// listenConnConfig is the connection config of the listener's connection:
// the pool's, with a per-host connect timeout when it has none.
func listenConnConfig(pool *pgxpool.Pool) *pgx.ConnConfig {
	cfg := pool.Config().ConnConfig.Copy()
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = listenConnectTimeout
	}
	return cfg
}

// waitNotification waits for the next notification on conn until ctx
// ends, sending ping (with a deadline) whenever conn has been silent for
// idle. It returns the ping's error when the connection does not answer
// within timeout: the caller then replaces it.
func waitNotification(ctx context.Context, conn *pgx.Conn, ping string, idle, timeout time.Duration) (*pgconn.Notification, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, idle)
		n, err := conn.WaitForNotification(wctx)
		silent := err != nil && wctx.Err() != nil && ctx.Err() == nil
		cancel()
		if n != nil {
			return n, nil
		}
		if !silent {
			return nil, err // a broken connection, or the end
		}
		// A wait that timed out leaves the connection usable (pgx does not
		// close it on a read deadline); ask the server to answer.
		// Below pgx's tracer: a ping every idle period is not the
		// pool's users' business (their tracers saw only the LISTEN).
		pctx, cancel := context.WithTimeout(ctx, timeout)
		err = conn.PgConn().Exec(pctx, ping).Close()
		cancel()
		if err != nil {
			return nil, err
		}
	}
}
