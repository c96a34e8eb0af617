package sentinel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Coalescing: many concurrent callers of one client share statements'
// round trips and commits, with no added wait for a lone caller.
//
// Each kind of state change below has a lane. While fewer than
// Config.CoalesceInFlight statements of a kind are in flight, an operation is sent at once, on its
// own, as it always was (a lone caller pays nothing). While the lanes are
// busy, callers that arrive queue, and when a lane lands the next round
// trip carries all of them (up to coMaxBatch) as one pgx.Batch: one round
// trip, one implicit transaction (a batch ends with one Sync), one commit
// and one WAL flush for the lot. Every statement is unchanged: the same
// guarded SQL with the same arguments, so each caller reads its own row and
// decides its own outcome exactly as before.
//
// Outcomes are isolated per caller:
//   - A statement that fails (a server error) aborts the batch's
//     transaction, so nothing of the batch committed: every statement of it
//     is then sent again on its own, and each caller gets its own outcome;
//     the one whose statement fails gets its own error.
//   - A batch whose outcome is unknown (the connection dropped, its context
//     ended) gives every caller of it that error, as a lone statement's
//     caller would get it: each caller's own statement may or may not have
//     committed, and the callers handle that as they do today.
//   - A caller whose ctx (queued) ends while it waits in the queue leaves
//     it and gets ctx's error; nothing of its was sent. Once sent, it waits
//     for its row like any statement in flight, until its statement
//     context ends (then its outcome is unknown, as for a statement
//     cancelled in flight); the batch runs until every caller's statement
//     context ended.
//
// Bounds: a batch carries at most coMaxBatch statements (statement size,
// and the time its transaction holds row locks); a queue holds at most
// coMaxQueue callers per kind, beyond which callers send their statements
// on their own, as without coalescing.
//
// Statements of one batch run in order in one transaction: a later one
// sees an earlier one's writes, as it would have had it run after it.
// Statement expiries count from clock_timestamp(), and a grant's time left
// from the statement's receipt, never earlier than the caller's send time,
// so a lease's local deadline stays conservative in a batch.

// coKind is a kind of statement the coalescer serves.
type coKind uint8

// The kinds the coalescer serves: writes, whose commits a batch shares.
// Reads (a Once key's row) are not among them: they commit nothing, and
// queueing them behind one in flight cost replays at 8 workers a third of
// their throughput (bench, 2026-11-24). (The heartbeat's renewals are
// batched by the heartbeat itself, one statement per tick: see
// heartbeat.go.)
const (
	coAcquire coKind = iota // a lease grant (sqlAcquire)
	coRelease               // a lease release (sqlRelease)
	coClaim                 // a Once claim (sqlClaim)
	coFinish                // a Once completion or other final transition (sqlFinish)
	coKinds
)

const (
	coMaxBatch = 32  // statements per batch
	coMaxQueue = 512 // queued callers per kind; more go on their own
)

type coalescer struct {
	pool     *pgxpool.Pool
	inFlight int // statements of a kind in flight before callers queue; < 0: off
	lanes    [coKinds]coLane
}

type coLane struct {
	mu       sync.Mutex
	inflight int
	queue    []*coCall
}

type coCall struct {
	ctx  context.Context // bounds the statement once sent
	sql  string
	args []any
	sent bool // under the lane's mu
	done chan struct{}
	row  coRow
}

func newCoalescer(pool *pgxpool.Pool, inFlight int) *coalescer {
	return &coalescer{pool: pool, inFlight: inFlight}
}

// queryRow runs a statement of kind that returns at most one row, like
// pool.QueryRow, coalesced with concurrent statements of its kind. ctx
// bounds the statement; queued, when it ends while the call is still queued,
// withdraws it. The returned row must be scanned (Scan reports the
// statement's error, pgx.ErrNoRows included).
func (co *coalescer) queryRow(ctx, queued context.Context, kind coKind, sql string, args ...any) pgx.Row {
	if co.inFlight < 0 {
		return co.pool.QueryRow(ctx, sql, args...)
	}
	ln := &co.lanes[kind]
	ln.mu.Lock()
	if ln.inflight < co.inFlight {
		ln.inflight++
		ln.mu.Unlock()
		return &loneRow{row: co.pool.QueryRow(ctx, sql, args...), landed: func() { co.landed(kind) }}
	}
	if len(ln.queue) >= coMaxQueue {
		ln.mu.Unlock()
		return co.pool.QueryRow(ctx, sql, args...)
	}
	call := &coCall{ctx: ctx, sql: sql, args: args, done: make(chan struct{})}
	ln.queue = append(ln.queue, call)
	ln.mu.Unlock()
	select {
	case <-call.done:
		return &call.row
	case <-queued.Done():
	case <-ctx.Done():
	}
	ln.mu.Lock()
	if !call.sent {
		for i, c := range ln.queue {
			if c == call {
				ln.queue = append(ln.queue[:i:i], ln.queue[i+1:]...)
				break
			}
		}
		ln.mu.Unlock()
		err := context.Cause(queued)
		if err == nil {
			err = context.Cause(ctx)
		}
		return &coRow{err: err}
	}
	ln.mu.Unlock()
	// In flight: its outcome decides, as for any statement, until ctx
	// (the statement's own bound) ends: then the caller learns ctx's
	// error, as a statement cancelled in flight reports it, and does not
	// wait on statements of other callers whose contexts last longer. (Its
	// row, when it lands, is read by no one.)
	select {
	case <-call.done:
		return &call.row
	case <-ctx.Done():
		return &coRow{err: context.Cause(ctx)}
	}
}

// landed is called when a statement or batch of kind finished: the lane
// takes the queue as its next batch, or frees itself.
func (co *coalescer) landed(kind coKind) {
	ln := &co.lanes[kind]
	ln.mu.Lock()
	if len(ln.queue) == 0 {
		ln.inflight--
		ln.mu.Unlock()
		return
	}
	n := min(len(ln.queue), coMaxBatch)
	batch := ln.queue[:n:n]
	ln.queue = append([]*coCall(nil), ln.queue[n:]...)
	for _, c := range batch {
		c.sent = true
	}
	ln.mu.Unlock()
	go func() {
		defer co.landed(kind)
		co.run(batch)
	}()
}

// run sends a batch and delivers each caller its row.
func (co *coalescer) run(batch []*coCall) {
	rows := co.send(batch)
	for i, c := range batch {
		c.row = rows[i]
		close(c.done)
	}
}

func (co *coalescer) send(batch []*coCall) []coRow {
	rows := make([]coRow, len(batch))
	if len(batch) == 1 {
		c := batch[0]
		r, err := co.pool.Query(c.ctx, c.sql, c.args...)
		rows[0] = bufferRow(r, err)
		return rows
	}
	// The batch runs until every caller's statement context ended.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := int32(len(batch))
	for _, c := range batch {
		stop := context.AfterFunc(c.ctx, func() {
			if atomic.AddInt32(&left, -1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	b := &pgx.Batch{}
	for _, c := range batch {
		b.Queue(c.sql, c.args...)
	}
	br := co.pool.SendBatch(ctx, b)
	var failed error
	for i := range batch {
		r, err := br.Query()
		rows[i] = bufferRow(r, err)
		if rows[i].err != nil && !errors.Is(rows[i].err, pgx.ErrNoRows) {
			failed = rows[i].err
			break
		}
	}
	if err := br.Close(); failed == nil {
		failed = err
	}
	if failed == nil {
		return rows
	}
	var pgErr *pgconn.PgError
	if !errors.As(failed, &pgErr) {
		// Unknown outcome: the batch may have committed. Each caller
		// learns it as it would for its own statement.
		for i := range rows {
			rows[i] = coRow{err: failed}
		}
		return rows
	}
	// The server refused a statement: the batch's transaction rolled back
	// and nothing of it committed. Send each statement on its own, so each
	// caller gets its own outcome.
	var wg sync.WaitGroup
	for i, c := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := co.pool.Query(c.ctx, c.sql, c.args...)
			rows[i] = bufferRow(r, err)
		}()
	}
	wg.Wait()
	return rows
}

// loneRow is a statement sent on its own: scanning it frees its lane.
type loneRow struct {
	row    pgx.Row
	landed func()
	once   sync.Once
}

func (r *loneRow) Scan(dest ...any) error {
	defer r.once.Do(r.landed)
	return r.row.Scan(dest...)
}

// coRow is one statement's first row, read off the connection, to be
// scanned by its caller.
type coRow struct {
	err    error
	fields []pgconn.FieldDescription
	values [][]byte
}

// bufferRow reads the first row of rows (as QueryRow would) and copies it.
func bufferRow(rows pgx.Rows, err error) coRow {
	if err != nil {
		return coRow{err: err}
	}
	defer rows.Close()
	var r coRow
	if rows.Next() {
		r.fields = append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
		for _, v := range rows.RawValues() {
			if v != nil {
				v = append([]byte{}, v...)
			}
			r.values = append(r.values, v)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return coRow{err: err}
	}
	if r.fields == nil {
		r.err = pgx.ErrNoRows
	}
	return r
}

// typeMaps are pgx type maps for scanning buffered rows: a map caches scan
// plans and is not safe for concurrent use. Sentinel's statements return
// built-in types only.
var typeMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

func (r *coRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	return pgx.ScanRow(m, r.fields, r.values, dest...)
}
