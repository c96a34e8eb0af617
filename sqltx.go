package sentinel

// This file: OnceSQLTx: OnceTx for database/sql transactions (SQLBeginner).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// SQLBeginner starts database/sql transactions: *sql.DB and *sql.Conn both
// fit.
type SQLBeginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// OnceSQLTx is OnceTx for database/sql code (sqlc, sqlx, ent, GORM, ...): fn
// receives a *sql.Tx begun on db, and fn's writes commit together with the
// completion of key, so a database-local effect happens exactly once and a
// crash inside fn leaves nothing behind. Everything OnceTx documents holds:
// competing callers get ErrInProgress while fn runs and the cached result
// afterwards (or wait, with WithWait); an error from fn rolls back and frees
// the key, while Final(err) commits fn's writes with err as the outcome; a
// lost lease rolls back and returns an error matching ErrLeaseLost. fn must
// not commit or roll back tx itself: if it does, the key is left uncertain
// (ErrUncertain) for an operator.
//
// db must reach the same database as the client's pool (the completion
// statement runs in fn's transaction, against the client's schema). The
// simplest way is one pool for both, through pgx's stdlib adapter:
//
//	pool, _ := pgxpool.New(ctx, url)
//	client, _ := sentinel.New(pool, nil)
//	db := stdlib.OpenDBFromPool(pool) // database/sql over the same connections
//	defer db.Close()
//
// db may also be a separate *sql.DB on the same database (tested with pgx's
// stdlib, extended and simple protocol; the completion's parameters are
// plain text, bytea, bigint and bool, so other PostgreSQL drivers using $n
// placeholders should work). The claim and the history of failures go
// through the client's pool. ctx bounds the wait for one of db's
// connections as it bounds the claim: a call whose ctx ends (or whose
// lease is lost) before its transaction began returns that error and
// leaves the key claimable. A nil db (also a nil *sql.DB or *sql.Conn)
// is ErrInvalid, and nothing is claimed. A nil ctx is refused (ErrInvalid).
//
// The commit, and a rollback, are bounded by Config.ReleaseTimeout as
// OnceTx's are, though database/sql's Commit and Rollback take no ctx: a
// commit that gets no reply in time (the database stopped answering, say
// over a path that vanished with no TCP timeout to notice) is abandoned, and
// its outcome established as OnceTx establishes a lost commit's: the key
// read back as completed is a success, a give-back that applied (or, not
// applied, followed by a read that finds the key not completed at this
// claim's token) proves that nothing was committed, and a give-back or
// read that failed leaves ErrUncertain with ExecutionError.Settles. pgx's
// stdlib runs the commit on the transaction's ctx, so an abandoned commit's
// connection is closed at once; with a driver that ignores that ctx the
// commit may still be running, in the background, when the call returns.
func OnceSQLTx[T any](ctx context.Context, c *Client, db SQLBeginner, key string, fn func(ctx context.Context, tx *sql.Tx) (T, error), opts ...Option) (Result[T], error) {
	if err := checkCtx("OnceSQLTx", ctx); err != nil {
		return Result[T]{}, err
	}
	if fn == nil {
		return Result[T]{}, invalid("fn", "must not be nil")
	}
	if db == nil || isNilPointer(db) {
		// A nil *sql.DB or *sql.Conn (a field never set) is not a nil
		// interface: BeginTx on it panicked after the claim, leaving the
		// key claimed until its lease expired.
		return Result[T]{}, invalid("db", "must not be nil (got a nil %T)", db)
	}
	var (
		tx     *sql.Tx
		cancel = func() {}
	)
	defer func() { cancel() }() // the transaction has ended: its ctx's resources go
	return onceInTx(ctx, c, key, opts, "OnceSQLTx",
		func(ctx context.Context) (txRunner, error) {
			var err error
			tx, cancel, err = beginSQL(ctx, db)
			return sqlTxRunner{tx: tx, cancel: cancel}, err
		},
		func(ctx context.Context) (T, error) { return fn(ctx, tx) })
}

// beginSQL begins fn's transaction on db. The transaction's ctx is not
// fn's ctx (ctx): database/sql rolls a transaction back by itself when
// that ends, and a closed transaction must mean that fn closed it (see
// onceInTx); a lost lease still cancels fn's statements, and the
// transaction is rolled back after fn. But the begin itself (waiting for
// one of db's connections, BEGIN) ends with ctx: begun on a ctx that never
// ended, a call whose db had no free connection waited past its caller's
// deadline, and past a lost lease, for as long as the connections stayed
// busy, with the key held by its heartbeat meanwhile. cancel ends the
// transaction's ctx: sqlTxRunner calls it when a commit or rollback does
// not answer in time (a driver that runs them on that ctx, as pgx's
// stdlib does, abandons them then), and OnceSQLTx once the call is over.
func beginSQL(ctx context.Context, db SQLBeginner) (*sql.Tx, context.CancelFunc, error) {
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	tx, err := db.BeginTx(bctx, nil)
	if stop() {
		return tx, cancel, err // bctx lives until cancel: the transaction lives until committed or rolled back
	}
	// ctx ended while beginning: a transaction begun anyway is rolled back
	// (database/sql does so as bctx ended; this waits for it).
	if err == nil {
		_ = tx.Rollback()
	}
	return nil, cancel, fmt.Errorf("%w (while beginning the transaction: %v)", context.Cause(ctx), err)
}

// isNilPointer reports whether v holds a nil pointer.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// sqlTxRunner runs onceInTx's steps on a database/sql transaction.
// database/sql's Commit and Rollback take no ctx: each is bounded here by
// the ctx onceInTx gives it (Config.ReleaseTimeout, as OnceTx's are), so
// that a database that stops answering (a path that vanished, with no TCP
// timeout to notice) cannot hold the call past its caller's ctx and its
// key's lease.
type sqlTxRunner struct {
	tx     *sql.Tx
	cancel context.CancelFunc // ends the transaction's ctx (beginSQL)
}

func (r sqlTxRunner) completeScan(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var n int64
	err := r.tx.QueryRowContext(ctx, query, args...).Scan(&n)
	return n, errors.Is(err, sql.ErrTxDone), err
}

// commit commits within ctx. A commit that has not answered when ctx ends
// is abandoned: its outcome is unknown (onceInTx reads the key back, and
// gives it back only when nothing committed), and the error says so.
func (r sqlTxRunner) commit(ctx context.Context) error {
	return r.bounded(ctx, "commit", r.tx.Commit)
}

func (r sqlTxRunner) rollback(ctx context.Context) bool {
	return errors.Is(r.bounded(ctx, "rollback", r.tx.Rollback), sql.ErrTxDone)
}

// sqlAbandonGrace is how long a commit or rollback is still waited for
// once its bound ran out and the transaction's ctx was ended: a driver
// that runs it on that ctx (pgx's stdlib) gives up at once, closing the
// connection.
const sqlAbandonGrace = 100 * time.Millisecond

// bounded runs op (the transaction's Commit or Rollback) and waits for it
// until ctx ends; then it ends the transaction's ctx, which a driver that
// runs op on it (pgx's stdlib) honours by abandoning op and closing its
// connection, and waits sqlAbandonGrace more. An op still running after
// that is left to finish in the background (a driver that ignores the
// ctx: it ends when the connection does), and the error says that its
// outcome is unknown.
func (r sqlTxRunner) bounded(ctx context.Context, what string, op func() error) error {
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	r.cancel()
	t := time.NewTimer(sqlAbandonGrace)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			err = fmt.Errorf("%s abandoned, no reply within its bound (%w): %w", what, context.Cause(ctx), err)
		}
		return err
	case <-t.C:
		return fmt.Errorf("%s abandoned, no reply within its bound (%w); it may still be in flight", what, context.Cause(ctx))
	}
}
