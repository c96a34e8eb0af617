package sentinel_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// sqlEnv is a client and a database/sql handle sharing one pgx pool, and a
// table of the test's own.
func sqlEnv(t *testing.T) (*sentinel.Client, *sql.DB, string) {
	t.Helper()
	e := newEnv(t)
	pool := e.pool(nil)
	c := e.clientOn(pool, nil)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	table := pgx.Identifier{e.schema, "orders"}.Sanitize()
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+table+" (id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return c, db, table
}

func countRows(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxT(t), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestOnceSQLTxCommitsWithCompletion(t *testing.T) {
	c, db, table := sqlEnv(t)
	insert := func(ctx context.Context, tx *sql.Tx) (string, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-1', 100)"); err != nil {
			return "", err
		}
		return "order o-1 booked", nil
	}
	res, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-1", insert)
	if err != nil || res.Cached || res.Value != "order o-1 booked" || res.Token == 0 {
		t.Fatalf("%+v, %v", res, err)
	}
	res, err = sentinel.OnceSQLTx(ctxT(t), c, db, "order-1", insert)
	if err != nil || !res.Cached || res.Value != "order o-1 booked" {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	if n := countRows(t, db, table); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
	ex, err := c.Inspect(ctxT(t), "order-1")
	if err != nil || ex.State != sentinel.StateCompleted {
		t.Fatalf("%+v, %v", ex, err)
	}
}

func TestOnceSQLTxFailureLeavesNothing(t *testing.T) {
	c, db, table := sqlEnv(t)
	write := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-2', 1)")
		return err
	}
	// An error after the write: rolled back, key free.
	_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-2", func(ctx context.Context, tx *sql.Tx) (int, error) {
		if err := write(ctx, tx); err != nil {
			return 0, err
		}
		return 0, errors.New("validation failed")
	})
	if err == nil || err.Error() != "validation failed" {
		t.Fatalf("err %v", err)
	}
	// A panic after the write: rolled back, key free, panic re-raised.
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_, _ = sentinel.OnceSQLTx(ctxT(t), c, db, "order-2", func(ctx context.Context, tx *sql.Tx) (int, error) {
			_ = write(ctx, tx)
			panic("crash between the write and the completion")
		})
	}()
	if n := countRows(t, db, table); n != 0 {
		t.Fatalf("%d rows after failures, want 0", n)
	}
	ex, err := c.Inspect(ctxT(t), "order-2")
	if err != nil || ex.State != sentinel.StateClaimed || ex.LeaseAlive {
		t.Fatalf("key after failures: %+v, %v", ex, err)
	}
	res, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-2", func(ctx context.Context, tx *sql.Tx) (int, error) {
		return 7, write(ctx, tx)
	})
	if err != nil || res.Value != 7 || countRows(t, db, table) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestOnceSQLTxConcurrentOneWinner(t *testing.T) {
	e := newEnv(t)
	pool := e.pool(nil)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	table := pgx.Identifier{e.schema, "orders"}.Sanitize()
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+table+" (id bigserial PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	const n = 12
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		c := e.clientOn(pool, nil) // competing workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "hot", func(ctx context.Context, tx *sql.Tx) (int, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" DEFAULT VALUES")
				time.Sleep(50 * time.Millisecond)
				return 1, err
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, sentinel.ErrInProgress) {
			t.Fatal(err)
		}
	}
	if got := countRows(t, db, table); got != 1 {
		t.Fatalf("%d rows, want exactly 1", got)
	}
}

func TestOnceSQLTxLostLeaseCommitsNothing(t *testing.T) {
	c, db, table := sqlEnv(t)
	_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-3", func(ctx context.Context, tx *sql.Tx) (int, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-3', 1)"); err != nil {
			return 0, err
		}
		c.Close() // the lease ends before the completion
		<-ctx.Done()
		return 1, nil
	})
	if err == nil || countRows(t, db, table) != 0 {
		t.Fatalf("err %v, rows %d", err, countRows(t, db, table))
	}
}

// Behind PgBouncer (simple protocol) the completion's parameters still encode.
func TestOnceSQLTxSimpleProtocol(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	for i := 0; i < 2; i++ {
		res, err := sentinel.OnceSQLTx(ctxT(t), c, db, "simple", func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
			return []byte("bytes"), nil
		})
		if err != nil || string(res.Value) != "bytes" || res.Cached != (i == 1) {
			t.Fatalf("call %d: %+v, %v", i, res, err)
		}
	}
	if _, err := sentinel.OnceSQLTx[int](ctxT(t), c, nil, "k", nil); !errors.Is(err, sentinel.ErrInvalid) {
		t.Fatal(err)
	}
}

func TestOnceSQLTxFinalCommitsWrites(t *testing.T) {
	c, db, table := sqlEnv(t)
	for i := 0; i < 2; i++ {
		_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-4", func(ctx context.Context, tx *sql.Tx) (int, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-4', 1)"); err != nil {
				return 0, err
			}
			return 0, sentinel.Final(errors.New("declined, recorded"))
		})
		var fe *sentinel.FinalError
		if !errors.As(err, &fe) || fe.Message != "declined, recorded" {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if n := countRows(t, db, table); n != 1 {
		t.Fatalf("%d rows, want 1 (the final outcome commits its writes once)", n)
	}
}

func TestOnceSQLTxFnClosingTxLeavesUncertain(t *testing.T) {
	c, db, table := sqlEnv(t)
	_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-5", func(ctx context.Context, tx *sql.Tx) (int, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-5', 1)"); err != nil {
			return 0, err
		}
		return 1, tx.Commit() // wrong: the write is committed without the completion
	})
	if !errors.Is(err, sentinel.ErrUncertain) {
		t.Fatalf("err %v, want ErrUncertain", err)
	}
	ex, err := c.Inspect(ctxT(t), "order-5")
	if err != nil || ex.State != sentinel.StateExecuting {
		t.Fatalf("%+v, %v", ex, err)
	}
}

// A *sql.Conn works as well as a *sql.DB.
func TestOnceSQLTxOnConn(t *testing.T) {
	c, db, table := sqlEnv(t)
	conn, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	res, err := sentinel.OnceSQLTx(ctxT(t), c, conn, "order-6", func(ctx context.Context, tx *sql.Tx) (int, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-6', 6)")
		return 6, err
	})
	if err != nil || res.Value != 6 || countRows(t, db, table) != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
}

// fn may run longer than Config.ReleaseTimeout: that bounds what follows
// fn (the commit, a rollback, the claim's release), counted from then. It
// used to count from before fn, so a slow fn's commit always failed,
// "commit failed, nothing was committed: context deadline exceeded", in
// OnceTx and OnceSQLTx alike.
func TestOnceTxFnSlowerThanReleaseTimeoutCommits(t *testing.T) {
	e := newEnv(t)
	pool := e.pool(nil)
	c := e.clientOn(pool, &sentinel.Config{ReleaseTimeout: 100 * time.Millisecond})
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	table := pgx.Identifier{e.schema, "orders"}.Sanitize()
	if _, err := db.ExecContext(ctxT(t), "CREATE TABLE "+table+" (id text PRIMARY KEY, amount int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	res, err := sentinel.OnceTx(ctxT(t), c, "pgx-slow", func(ctx context.Context, tx pgx.Tx) (string, error) {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-1', 100)"); err != nil {
			return "", err
		}
		time.Sleep(400 * time.Millisecond) // four ReleaseTimeouts
		return "booked", nil
	})
	if err != nil || res.Value != "booked" {
		t.Fatalf("OnceTx: %+v, %v", res, err)
	}
	sres, err := sentinel.OnceSQLTx(ctxT(t), c, db, "sql-slow", func(ctx context.Context, tx *sql.Tx) (string, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('o-2', 200)"); err != nil {
			return "", err
		}
		time.Sleep(400 * time.Millisecond)
		return "booked", nil
	})
	if err != nil || sres.Value != "booked" {
		t.Fatalf("OnceSQLTx: %+v, %v", sres, err)
	}
	if n := countRows(t, db, table); n != 2 {
		t.Fatalf("%d rows committed, want 2", n)
	}
	for _, key := range []string{"pgx-slow", "sql-slow"} {
		ex, err := c.Inspect(ctxT(t), key)
		if err != nil || ex.State != sentinel.StateCompleted {
			t.Fatalf("%s: %+v, %v", key, ex, err)
		}
	}
}

// OnceSQLTx refuses WithRerun as OnceTx does, writing nothing, and says
// so by its name: the message named only OnceTx, a call the caller did
// not make.
func TestOnceSQLTxRefusesWithRerun(t *testing.T) {
	c, db, _ := sqlEnv(t)
	_, err := sentinel.OnceSQLTx(ctxT(t), c, db, "order-rerun", func(context.Context, *sql.Tx) (int, error) {
		t.Error("fn ran")
		return 0, nil
	}, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	require.Contains(t, err.Error(), "OnceSQLTx")
	_, err = c.Inspect(ctxT(t), "order-rerun")
	require.ErrorIs(t, err, sentinel.ErrNotFound)
}

// A nil *sql.DB (a field never set) is not a nil interface: OnceSQLTx
// refuses it with ErrInvalid before claiming, where BeginTx on it panicked
// after the claim and left the key claimed, with a live lease, for a TTL.
func TestOnceSQLTxNilPointerDB(t *testing.T) {
	c, _, _ := sqlEnv(t)
	for name, db := range map[string]sentinel.SQLBeginner{"*sql.DB": (*sql.DB)(nil), "*sql.Conn": (*sql.Conn)(nil)} {
		key := "nil-db-" + name
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("%s: OnceSQLTx panicked: %v", name, p)
				}
			}()
			_, err = sentinel.OnceSQLTx(ctxT(t), c, db, key, func(ctx context.Context, tx *sql.Tx) (int, error) { return 1, nil })
		}()
		if !errors.Is(err, sentinel.ErrInvalid) {
			t.Fatalf("%s: got %v, want ErrInvalid", name, err)
		}
		if _, err := c.Inspect(ctxT(t), key); !errors.Is(err, sentinel.ErrNotFound) {
			t.Fatalf("%s: the key was written: %v", name, err)
		}
	}
}

// The caller's ctx bounds the wait for one of db's connections: with
// db's only connection busy, a call with a short deadline returns with
// the deadline's error and hands the key back, where it waited (its key
// held by the heartbeat) until the connection came free.
func TestOnceSQLTxBeginHonoursCtx(t *testing.T) {
	c, _, table := sqlEnv(t)
	db, err := sql.Open("pgx", dbURL) // a separate *sql.DB on the same database, one connection
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	busy, err := db.Conn(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	ran := false
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.OnceSQLTx(ctx, c, db, "busy-db", func(ctx context.Context, tx *sql.Tx) (int, error) {
			ran = true
			return 1, nil
		})
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		_ = busy.Close() // let the call finish
		t.Fatalf("OnceSQLTx still waiting for a connection 10s after its ctx ended; then: %v", <-done)
	}
	if !errors.Is(err, context.DeadlineExceeded) || ran {
		t.Fatalf("got %v (fn ran: %v), want the ctx's deadline and fn not run", err, ran)
	}
	ex, err := c.Inspect(ctxT(t), "busy-db")
	if err != nil || ex.State != sentinel.StateClaimed || ex.LeaseAlive {
		t.Fatalf("the key is not handed back: %+v, %v", ex, err)
	}
	_ = busy.Close()
	res, err := sentinel.OnceSQLTx(ctxT(t), c, db, "busy-db", func(ctx context.Context, tx *sql.Tx) (int, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (id, amount) VALUES ('busy', 1)")
		return 2, err
	})
	if err != nil || res.Value != 2 || res.Cached {
		t.Fatalf("the next call: %+v, %v", res, err)
	}
}
