package sentinel_test

// This file: OnceSQLTx when the database stops answering at its commit or
// rollback.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// stopDialer dials TCP with keepalives off, and makes a connection stop
// answering from the moment it sends a message containing the armed text
// (stopAt): that message and everything after it is dropped, what the
// server sends is discarded, and nothing is closed, as on a path that
// vanished. The server never sees the message: the transaction stays
// open there until the connection is closed.
type stopDialer struct {
	mu    sync.Mutex
	conns []*stopConn
	at    atomic.Pointer[[]byte]
	// closeAfter, when set, closes a connection that stopped answering
	// that long after it did, as a path that comes back with a reset
	// would: the server then rolls back the transaction left open.
	closeAfter time.Duration
}

type stopConn struct {
	net.Conn
	d    *stopDialer
	hole atomic.Bool
}

func (c *stopConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.hole.Load() {
			return n, err
		}
		// Stopped answering: the bytes never arrived. Deadlines still apply.
	}
}

func (c *stopConn) Write(b []byte) (int, error) {
	if at := c.d.at.Load(); at != nil && bytes.Contains(b, *at) && !c.hole.Swap(true) && c.d.closeAfter > 0 {
		time.AfterFunc(c.d.closeAfter, func() { _ = c.Conn.Close() })
	}
	if c.hole.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (d *stopDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{KeepAlive: -1}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	sc := &stopConn{Conn: c, d: d}
	d.mu.Lock()
	d.conns = append(d.conns, sc)
	d.mu.Unlock()
	return sc, nil
}

// stopAt arms the dialer's connections: the first message that contains
// statement (as sent, NUL-terminated) and all after it are dropped.
func (d *stopDialer) stopAt(statement string) {
	b := append([]byte(statement), 0)
	d.at.Store(&b)
}

func (d *stopDialer) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Conn.Close()
	}
}

// OnceSQLTx bounds its commit (and a rollback) by Config.ReleaseTimeout,
// as OnceTx does: when the database stops answering at the commit, the call
// returns in time, the commit's outcome unknown (ErrUncertain), instead of
// waiting for the connection's TCP timeouts, past the caller's ctx and
// the key's lease. The commit never reached the server: once the abandoned
// connection is closed, nothing of fn's was committed.
func TestOnceSQLTxCommitThatNeverAnswersIsBounded(t *testing.T) {
	for _, tc := range []struct {
		name, at   string
		fnErr      error
		closeAfter time.Duration
	}{
		{"commit", "commit", nil, 0},
		{"rollback", "rollback", errors.New("declined"), 0},
		// The connection is reset while the give-back waits for the row
		// the open transaction holds: the server rolls it back, and the
		// give-back that then applies proves that nothing was committed.
		// (The give-back ran on the commit's spent bound and failed at
		// once: ErrUncertain, for a payment nobody made.)
		{"commit, then the connection reset", "commit", nil, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			table := e.table("ledger")
			_, err := admin.Exec(ctx, "CREATE TABLE "+table+" (key text NOT NULL)")
			require.NoError(t, err)
			d := &stopDialer{closeAfter: tc.closeAfter}
			cfg, err := pgx.ParseConfig(dbURL)
			require.NoError(t, err)
			cfg.DialFunc = d.dial
			cfg.TLSConfig, cfg.Fallbacks = nil, nil // plain bytes, for stopAt to see
			db := stdlib.OpenDB(*cfg)
			t.Cleanup(func() { _ = db.Close() })
			t.Cleanup(d.closeAll) // first: unblocks a call still waiting on its connection
			const release = time.Second
			c := e.client(&sentinel.Config{ReleaseTimeout: release})

			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := sentinel.OnceSQLTx(ctx, c, db, "charge", func(ctx context.Context, tx *sql.Tx) (string, error) {
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (key) VALUES ('charge')"); err != nil {
						return "", err
					}
					d.stopAt(tc.at)
					return "booked", tc.fnErr
				}, sentinel.WithTTL(time.Minute))
				done <- err
			}()
			select {
			case err := <-done:
				took := time.Since(start)
				t.Logf("returned after %s: %v", took, err)
				require.Less(t, took, 8*release, "bounded by ReleaseTimeout")
				switch {
				case tc.fnErr != nil:
					require.ErrorIs(t, err, tc.fnErr)
					require.NotErrorIs(t, err, sentinel.ErrUncertain)
				case tc.closeAfter > 0:
					require.Error(t, err)
					require.NotErrorIs(t, err, sentinel.ErrUncertain, "the give-back applied: nothing was committed")
					require.Contains(t, err.Error(), "nothing was committed")
				default:
					require.ErrorIs(t, err, sentinel.ErrUncertain, "a commit whose reply never came")
					// The key is claimed (or completed, had the commit
					// landed): never executing, as the error said.
					var ee *sentinel.ExecutionError
					require.ErrorAs(t, err, &ee)
					require.Equal(t, sentinel.StateClaimed, ee.State, "%v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("OnceSQLTx still waits for a %s that never answers, 30s on (ReleaseTimeout %s)", tc.at, release)
			}
			waitFor(t, 10*time.Second, "the abandoned transaction rolled back", func() bool {
				return e.count("ledger", "") == 0
			})
			ex, err := c.Inspect(ctx, "charge")
			require.NoError(t, err)
			require.NotEqual(t, sentinel.StateCompleted, ex.State)
		})
	}
}
