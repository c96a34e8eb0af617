package sentinel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The rows every Once reads (a key's row, the claim statement's) are
// decoded from their raw values when they are in the plain binary form
// (rowdecode.go): the Execution is exactly the one pgx's generic scan
// makes, for every state and every nullable column set or not; a row in
// another form (the simple protocol's text), or under a codec of the
// application's own, is scanned generically.
func TestExecRowDecodedAsPgxDecodes(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	const owner, host, pid = "decoder", "decode-host", 77

	// A key in every state, with the nullable columns set and not.
	_, err := sentinel.Once(ctx, c, "done", func(context.Context) (map[string]int, error) { return map[string]int{"n": 1}, nil })
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, c, "final", func(context.Context) (int, error) { return 0, sentinel.Final(errors.New("card declined")) })
	require.ErrorIs(t, err, sentinel.ErrFinal)
	for _, k := range []string{"reconciling", "forced", "uncertain", "claimed"} {
		_, err = sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	_, err = admin.Exec(ctx, "UPDATE "+e.table("executions")+` SET state = 'executing', completed_at = NULL, result = NULL,
		lease_expires_at = now() - interval '1 second' WHERE key IN ('reconciling', 'forced', 'uncertain')`)
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "reconciling")
	require.NoError(t, err)
	_, err = c.Reconcile(ctx, "forced")
	require.NoError(t, err)
	require.NoError(t, c.ForceComplete(ctx, "forced", "by hand"))
	// A lease far ahead: its time left has days.
	_, err = admin.Exec(ctx, "UPDATE "+e.table("executions")+` SET state = 'claimed', completed_at = NULL, result = NULL,
		lease_expires_at = now() + interval '3 days 5 hours 7 microseconds' WHERE key = 'claimed'`)
	require.NoError(t, err)
	running := make(chan struct{})
	stop := make(chan struct{})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = sentinel.Once(ctx, c, "running", func(context.Context) (int, error) { close(running); <-stop; return 1, nil })
	}()
	<-running
	defer func() { close(stop); <-ran }()
	keys := []string{"done", "final", "reconciling", "forced", "uncertain", "claimed", "running"}

	query := func(pool *pgxpool.Pool, claim bool, key string) (string, []any) {
		if claim {
			return sentinel.ClaimSQL(c), []any{"default", key, "executing", owner, host, pid, int64(3_000_000), int64(600_000_000), nil, 1, int64(0)}
		}
		return sentinel.ReadSQL(c), []any{"default", key}
	}
	check := func(pool *pgxpool.Pool, wantRaw bool) {
		t.Helper()
		for _, k := range keys {
			for _, claim := range []bool{false, true} {
				// Not claimed (the key is held, completed, uncertain or
				// reconciling): the claim returns the row as read.
				sql, args := query(pool, claim, k)
				rows, err := pool.Query(ctx, sql, args...)
				require.NoError(t, err)
				require.True(t, rows.Next(), k)
				require.Equal(t, wantRaw, sentinel.DecodesRaw(rows, claim), "%s (claim %v): decoded from raw values", k, claim)
				rows.Close()
				var viaRaw, viaPgx *sentinel.Execution
				if claim {
					viaRaw, _, err = sentinel.ScanClaim(sentinel.FastRow(pool.QueryRow(ctx, sql, args...)), "default", k, sentinel.StateExecuting, owner, host, pid)
					require.NoError(t, err, k)
					viaPgx, _, err = sentinel.ScanClaim(pool.QueryRow(ctx, sql, args...), "default", k, sentinel.StateExecuting, owner, host, pid)
				} else {
					viaRaw, err = sentinel.ScanExecution(sentinel.FastRow(pool.QueryRow(ctx, sql, args...)))
					require.NoError(t, err, k)
					viaPgx, err = sentinel.ScanExecution(pool.QueryRow(ctx, sql, args...))
				}
				require.NoError(t, err, k)
				// The time left is counted at each statement's start.
				require.Equal(t, sentinel.RemainingForTest(viaPgx).Round(time.Hour), sentinel.RemainingForTest(viaRaw).Round(time.Hour), k)
				sentinel.SetRemainingForTest(viaRaw, sentinel.RemainingForTest(viaPgx))
				require.Equal(t, viaPgx, viaRaw, "%s (claim %v)", k, claim)
				require.Equal(t, k, viaRaw.Key)
			}
		}
	}
	check(e.pool(nil), true)
	check(e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol }), false)
	check(e.pool(func(cfg *pgxpool.Config) {
		cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
			conn.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
				Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
			return nil
		}
	}), false)

	// A fresh key: the claim's packed fields, read both ways alike.
	pool := e.pool(nil)
	sql, args := query(pool, true, "fresh")
	rows, err := pool.Query(ctx, sql, args...)
	require.NoError(t, err)
	require.True(t, rows.Next())
	require.True(t, sentinel.DecodesRaw(rows, true))
	rows.Close()
	for _, k := range []string{"fresh-raw", "fresh-pgx"} {
		_, args := query(pool, true, k)
		row := pool.QueryRow(ctx, sql, args...)
		if k == "fresh-raw" {
			row = sentinel.FastRow(row)
		}
		ex, claimed, err := sentinel.ScanClaim(row, "default", k, sentinel.StateExecuting, owner, host, pid)
		require.NoError(t, err)
		require.True(t, claimed)
		stored, err := c.Inspect(ctx, k)
		require.NoError(t, err)
		require.Equal(t, stored.Token, ex.Token)
		require.True(t, stored.LeaseExpiresAt.Equal(ex.LeaseExpiresAt))
	}
}
