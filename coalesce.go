package sentinel

// This file: The coalescer: calls of one statement kind waiting together are sent as one set statement (coKindsTable: each kind's columns), one batch in flight per kind, and its rows handed back to each call (coRow, loneRow).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Coalescing: many concurrent callers of one client share statements'
// round trips and commits, with no added wait for a lone caller.
//
// Each kind of statement below has a lane. While fewer than
// Config.CoalesceInFlight statements of a kind are in flight, or the calls
// the coalescer serves (this one included) are no more than the pool's
// connections, an operation is sent at once, on its own, as it always was
// (a lone caller pays nothing, and neither does one of a few callers that
// each could have a connection). Only while statements of its kind are in
// flight and there are more callers than connections does a caller queue:
// it would wait for a connection anyway. When a lane lands, the next round
// trip carries the queue (up to coMaxBatch calls): one round trip, one
// implicit transaction, one commit and one WAL flush for the lot.
//
// A batch of the kind's own statements is one statement over arrays (see
// coKindsTable: sqlAcquireSet, sqlReleaseSet, sqlClaimSet, sqlFinishSet,
// sqlReadSet), one call per key; a batch that holds other statements (tests
// send some) is a pgx.Batch of them (a batch ends with one Sync: one
// implicit transaction). Either way each call is decided by the same
// guards as its single statement, on its own row, and gets its own
// outcome.
//
// Outcomes are isolated per caller:
//   - A statement that fails (a server ERROR) aborts the batch's
//     transaction, so nothing of the batch committed: every statement of it
//     is then sent again on its own, and each caller gets its own outcome;
//     the one whose statement fails gets its own error.
//   - A batch whose outcome is unknown (the connection dropped, its context
//     ended, a FATAL, a connection exception or shutdown error: see
//     commitUnknown) gives every caller of it that error, as a lone
//     statement's caller would get it: each caller's own statement may or
//     may not have committed, and the callers handle that as they do for
//     a lost reply (a completion or give-back is retried and read back; a
//     grant or claim that committed is held by no one until its TTL; a
//     release is reported failed, the key free at once or within a TTL).
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

// The kinds the coalescer serves. Writes share commits; reads (a Once
// key's row) share round trips, as one set statement (as a pgx.Batch of
// single reads, queued behind one in flight, they cost replays at 8
// workers a third of their throughput: bench, 2026-11-24).
const (
	coAcquire coKind = iota // a lease grant (sqlAcquire; set: sqlAcquireSet)
	coRelease               // a lease release (sqlRelease; set: sqlReleaseSet)
	coClaim                 // a Once claim, replay included (sqlClaim; set: sqlClaimSet)
	coFinish                // a Once completion or other final transition (sqlFinish; set: sqlFinishSet)
	coRead                  // a Once key's row (sqlReadExecution; set: sqlReadSet)
	coKinds
)

// coKindSpec is a row of the kinds table.
type coKindSpec struct {
	name string
	// cols, when set, are the element types of the kind's set statement's
	// array parameters, one per argument of its single statement: a batch
	// of the kind's own statements on distinct keys goes out as one
	// set-based statement (one plan and one executor run for the lot; the
	// bench measured 3.4x the claims per second of the same claims as a
	// pipeline of single statements). Without cols, a batch is a pgx.Batch
	// of the single statements.
	cols []coCol
	// shared: calls on one key may share a set statement (reads, and
	// claims: of the calls on one key sqlClaimSet lets only the first change
	// the row); without it a set statement carries one call per key, as it
	// changes a row once.
	shared bool
}

// coKindsTable is every kind the coalescer serves, in one place. The
// heartbeat's renewal (heartbeat.go, renewKinds in queries.go) is the
// model of a set statement: one statement per tick renews every lease,
// execution, term, member and ticket a client holds, from arrays.
var coKindsTable = [coKinds]coKindSpec{
	coAcquire: {name: "lease grant", cols: []coCol{
		colText, colText, colText, colText, colInt, colInt, colInt, colBool, colInt}},
	coRelease: {name: "lease release", cols: []coCol{colText, colText, colText, colInt}},
	coClaim: {name: "Once claim", cols: []coCol{
		colText, colText, colText, colText, colText, colInt, colInt, colInt, colNullText, colInt, colInt}, shared: true},
	coFinish: {name: "Once completion", cols: []coCol{
		colText, colText, colText, colInt, colText, colBytes, colNullText, colTextList, colBool, colText, colNullText, colNullText}},
	coRead: {name: "Once read", cols: []coCol{colText, colText}, shared: true},
}

// coCol builds one array parameter of a set statement from argument j of
// every call of a batch. Typed slices, not []any: pgx encodes them in
// every query exec mode (behind PgBouncer too).
type coCol func(batch []*coCall, j int) (any, bool)

func colText(batch []*coCall, j int) (any, bool) {
	out := make([]string, len(batch))
	for i, c := range batch {
		v, ok := c.args[j].(string)
		if !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func colNullText(batch []*coCall, j int) (any, bool) {
	out := make([]*string, len(batch))
	for i, c := range batch {
		switch v := c.args[j].(type) {
		case nil:
		case string:
			out[i] = &v
		default:
			return nil, false
		}
	}
	return out, true
}

func colInt(batch []*coCall, j int) (any, bool) {
	out := make([]int64, len(batch))
	for i, c := range batch {
		switch v := c.args[j].(type) {
		case int:
			out[i] = int64(v)
		case int32:
			out[i] = int64(v)
		case int64:
			out[i] = v
		default:
			return nil, false
		}
	}
	return out, true
}

func colBool(batch []*coCall, j int) (any, bool) {
	out := make([]bool, len(batch))
	for i, c := range batch {
		v, ok := c.args[j].(bool)
		if !ok {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

func colBytes(batch []*coCall, j int) (any, bool) {
	out := make([][]byte, len(batch))
	for i, c := range batch {
		v, ok := c.args[j].([]byte)
		if !ok && c.args[j] != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// colTextList joins a []string argument with commas (states: no commas).
func colTextList(batch []*coCall, j int) (any, bool) {
	out := make([]string, len(batch))
	for i, c := range batch {
		v, ok := c.args[j].([]string)
		if !ok {
			return nil, false
		}
		for _, s := range v {
			if strings.Contains(s, ",") {
				return nil, false
			}
		}
		out[i] = strings.Join(v, ",")
	}
	return out, true
}

const (
	coMaxBatch = 32      // statements per batch
	coMaxBytes = 1 << 20 // argument bytes per batch (results can be large); a call over it goes alone
	coMaxQueue = 512     // queued callers per kind; more go on their own
)

type coalescer struct {
	pool     *pgxpool.Pool
	inFlight int // statements of a kind in flight before callers queue; < 0: off
	lanes    [coKinds]coLane
	// single and set are a kind's statements: a batch of calls of single
	// statements goes out as set; empty set: as a pgx.Batch.
	single [coKinds][]string
	set    [coKinds]string
	sets   atomic.Int64 // set statements sent (tests)
	// callers counts the calls the coalescer is serving: sent on their own
	// and not landed, queued, or carried by a batch in flight. Each of them
	// holds or waits for a connection of the pool, which has conns.
	callers atomic.Int32
	conns   int32
	// noSpare: tests make the pool look busy, so callers queue.
	noSpare atomic.Bool
}

// spare reports whether the calls the coalescer serves, this one included,
// fit in the pool: each could have a connection of its own, so this call is
// sent at once rather than queue behind a statement of its kind in flight.
// Callers queue only while there are more of them than connections: then
// a queued call would wait for a connection anyway, and sharing the next
// round trip and commit costs it nothing. (Counting statements in flight
// instead let a caller go alone whenever one landed: on a pool of 8 with
// 64 callers that sent twice the statements, and the server, busy with
// their per-statement work, did less.)
func (co *coalescer) spare() bool {
	return co.callers.Load() < co.conns && !co.noSpare.Load()
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

// key names the row a call changes: its first two arguments (namespace,
// key) for every kind.
func (c *coCall) key() [2]any {
	if len(c.args) < 2 {
		return [2]any{}
	}
	return [2]any{c.args[0], c.args[1]}
}

// size is a rough count of a call's argument bytes.
func (c *coCall) size() int {
	n := 0
	for _, a := range c.args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 8
		}
	}
	return n
}

func newCoalescer(pool *pgxpool.Pool, inFlight int) *coalescer {
	return &coalescer{pool: pool, inFlight: inFlight, conns: pool.Config().MaxConns}
}

// setStatements registers kind's set statement and the single statements
// it serves.
func (co *coalescer) setStatements(kind coKind, set string, single ...string) {
	co.single[kind], co.set[kind] = single, set
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
	if ln.inflight < co.inFlight || (len(ln.queue) == 0 && co.spare()) {
		ln.inflight++
		co.callers.Add(1)
		ln.mu.Unlock()
		r := &loneRow{served: func() { co.callers.Add(-1) }, landed: func() { co.landed(kind) }}
		// A statement still in flight after coLockWait waits for a row
		// another transaction holds (or a slow server): it stops holding
		// its lane, so that calls of other keys do not wait behind it.
		r.timer = time.AfterFunc(coLockWait, r.land)
		r.row = co.pool.QueryRow(ctx, sql, args...)
		return r
	}
	if len(ln.queue) >= coMaxQueue {
		ln.mu.Unlock()
		return co.pool.QueryRow(ctx, sql, args...)
	}
	call := &coCall{ctx: ctx, sql: sql, args: args, done: make(chan struct{})}
	ln.queue = append(ln.queue, call)
	co.callers.Add(1)
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
				co.callers.Add(-1)
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
	batch, rest := nextBatch(ln.queue, coKindsTable[kind].shared)
	for _, c := range batch {
		c.sent = true
	}
	ln.queue = rest
	ln.mu.Unlock()
	go func() {
		// A batch still in flight after coLockWait waits for a row
		// another transaction holds (or a slow server): it stops holding
		// its lane, as a lone statement does (see loneRow).
		var once sync.Once
		land := func() { once.Do(func() { co.landed(kind) }) }
		t := time.AfterFunc(coLockWait, land)
		defer land()
		defer t.Stop()
		co.run(kind, batch)
	}()
}

// nextBatch splits a queue into the next batch and the rest, both in queue
// order: up to coMaxBatch calls and coMaxBytes of arguments (a call over
// the bound goes alone), one call per key unless shared (a call on a key
// already in the batch waits for the next one: a set statement changes a
// row once).
func nextBatch(queue []*coCall, shared bool) (batch, rest []*coCall) {
	seen := make(map[[2]any]struct{}, min(len(queue), coMaxBatch))
	bytes := 0
	for _, c := range queue {
		k := c.key()
		_, dup := seen[k]
		sz := c.size()
		if (dup && !shared) || len(batch) == coMaxBatch || (len(batch) > 0 && bytes+sz > coMaxBytes) {
			rest = append(rest, c)
			continue
		}
		seen[k] = struct{}{}
		bytes += sz
		batch = append(batch, c)
	}
	return batch, rest
}

// run sends a batch and delivers each caller its row. When the server
// refused the batch (nothing of it committed), each statement is sent
// again on its own, off the lane: the lane takes its next batch at once,
// so that a statement that waits (for a row another transaction holds)
// holds up no one but its caller.
func (co *coalescer) run(kind coKind, batch []*coCall) {
	rows, alone := co.send(kind, batch)
	if alone {
		for _, c := range batch {
			go func() {
				r, err := co.pool.Query(c.ctx, c.sql, c.args...)
				c.row = bufferRow(r, err)
				close(c.done)
				co.callers.Add(-1)
			}()
		}
		return
	}
	for i, c := range batch {
		c.row = rows[i]
		close(c.done)
	}
	co.callers.Add(-int32(len(batch)))
}

// send sends a batch and returns each call's row, or alone: the server
// refused the batch, nothing of it committed, and each call must be sent
// on its own.
func (co *coalescer) send(kind coKind, batch []*coCall) (rows []coRow, alone bool) {
	rows = make([]coRow, len(batch))
	if len(batch) == 1 {
		c := batch[0]
		r, err := co.pool.Query(c.ctx, c.sql, c.args...)
		rows[0] = bufferRow(r, err)
		return rows, false
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
	var failed error
	if args, ok := co.setArgs(kind, batch); ok {
		co.sets.Add(1)
		failed = co.sendSet(ctx, kind, args, rows)
	} else {
		b := &pgx.Batch{}
		for _, c := range batch {
			b.Queue(c.sql, c.args...)
		}
		br := co.pool.SendBatch(ctx, b)
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
	}
	if failed == nil {
		return rows, false
	}
	if commitUnknown(failed) {
		// Unknown outcome: the batch may have committed. Each caller
		// learns it as it would for its own statement.
		for i := range rows {
			rows[i] = coRow{err: failed}
		}
		return rows, false
	}
	// The server refused a statement (or a row lock outlasted
	// coLockTimeout): the batch's transaction rolled back and nothing of
	// it committed. Each statement goes again on its own, so each caller
	// gets its own outcome.
	return nil, true
}

// commitUnknown reports whether a batch that failed with err may have
// committed. Only an error the server raised while running the batch (an
// ERROR: a statement refused, a constraint, a serialization failure at
// commit) rolls its implicit transaction back for sure. Anything else may
// come after the commit: a connection that ended (PostgreSQL closes it
// without a word when its backend is terminated after the commit is
// local, waiting for a synchronous standby), a FATAL or PANIC, and the
// errors that say the connection was lost rather than that a statement
// failed: class 08 (connection exception: PgBouncer answers ERROR 08P01
// "server conn crashed?" when the server closed its connection, whatever
// the server had committed) and 57P0x (the server shutting down or
// terminating the backend).
func commitUnknown(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true
	}
	switch {
	case pgErr.Severity == "FATAL", pgErr.Severity == "PANIC",
		pgErr.SeverityUnlocalized == "FATAL", pgErr.SeverityUnlocalized == "PANIC":
		return true
	case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P0"):
		return true
	}
	return false
}

// setArgs returns the array parameters of kind's set statement for batch,
// or false when the batch must go as a pgx.Batch: the kind has no set
// statement, a call is not the kind's own statement (tests send others),
// or an argument has a type the column does not take.
func (co *coalescer) setArgs(kind coKind, batch []*coCall) ([]any, bool) {
	spec := &coKindsTable[kind]
	if co.set[kind] == "" || spec.cols == nil {
		return nil, false
	}
	for _, c := range batch {
		if !slices.Contains(co.single[kind], c.sql) || len(c.args) != len(spec.cols) {
			return nil, false
		}
	}
	args := make([]any, len(spec.cols))
	for j, col := range spec.cols {
		a, ok := col(batch, j)
		if !ok {
			return nil, false
		}
		args[j] = a
	}
	return args, true
}

// sendSet runs kind's set statement and hands each call the row whose
// first column is its ordinal (1-based), less that column; a call with no
// row gets pgx.ErrNoRows, as its single statement would. It returns the
// statement's error, rows untouched then.
func (co *coalescer) sendSet(ctx context.Context, kind coKind, args []any, rows []coRow) error {
	b := &pgx.Batch{}
	b.Queue(sqlSetPlan)
	b.Queue(co.set[kind], args...)
	br := co.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return err
	}
	r, err := br.Query()
	if err != nil {
		return err
	}
	defer r.Close()
	got := make([]coRow, len(rows))
	for i := range got {
		got[i].err = pgx.ErrNoRows
	}
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	var fields []pgconn.FieldDescription
	for r.Next() {
		if fields == nil {
			fields = append([]pgconn.FieldDescription(nil), r.FieldDescriptions()...)
		}
		raw := r.RawValues()
		var ord int64
		if err := m.Scan(fields[0].DataTypeOID, fields[0].Format, raw[0], &ord); err != nil {
			return err
		}
		if ord < 1 || ord > int64(len(got)) {
			return fmt.Errorf("sentinel: coalesced %s: row for call %d of %d", coKindsTable[kind].name, ord, len(got))
		}
		row := coRow{fields: fields[1:]}
		for _, v := range raw[1:] {
			if v != nil {
				v = append([]byte{}, v...)
			}
			row.values = append(row.values, v)
		}
		got[ord-1] = row
	}
	r.Close()
	if err := r.Err(); err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		return err
	}
	copy(rows, got)
	return nil
}

// sqlSetPlan runs before every set statement, in its transaction (the
// batch's implicit one). It bounds how long the statement waits for a row
// lock (coLockTimeout): a row another transaction holds (an open
// transaction that locked it FOR SHARE or FOR UPDATE, a fencing guard
// that a lease's release or takeover must wait for) fails the batch, whose
// statements then go on their own; only the caller of that row waits for
// it, as it would have without coalescing. Without the bound, the whole
// batch waited for that one row, and every call queued behind it in the
// lane; completions, which leave the heartbeat before they are sent,
// outlived their leases and were refused (8 of 16 healthy runs, one row
// locked for 1.5 TTL: TestSlowBatchDoesNotHoldOtherCompletions). It also
// makes the statement find each call's row by its primary key, whatever
// the tables' statistics say. Without it, a table
// never analyzed yet (a new schema: PostgreSQL assumes 10 pages) or
// analyzed while nearly empty made the cached generic plan of a set
// statement a hash join over a sequential scan, which stayed cached while
// the table grew, until autovacuum analyzed it: every set statement read
// the whole table (62 ms at 200,000 executions, against 0.1 ms).
const sqlSetPlan = `SELECT pg_catalog.set_config('enable_seqscan', 'off', true),
    pg_catalog.set_config('enable_hashjoin', 'off', true), pg_catalog.set_config('enable_mergejoin', 'off', true),
    pg_catalog.set_config('lock_timeout', '` + coLockTimeout + `', true)`

// coLockWait bounds how long a set statement waits for a row lock, and
// how long a statement sent on its own holds its lane. Sentinel's own
// statements hold a row until their commit (milliseconds, tens on a slow
// disk); a longer wait means a transaction of someone else's holds it.
// Well below the TTLs in use (default 3s), so that the calls sent again
// on their own still land within their leases.
const (
	coLockWait    = 100 * time.Millisecond
	coLockTimeout = "100ms" // coLockWait, as lock_timeout
)

// loneRow is a statement sent on its own: scanning it frees its lane (if
// coLockWait has not already).
type loneRow struct {
	row    pgx.Row
	served func() // the call is done
	landed func() // frees its lane
	timer  *time.Timer
	once   sync.Once
}

func (r *loneRow) land() { r.once.Do(r.landed) }

func (r *loneRow) Scan(dest ...any) error {
	defer r.served()
	defer r.land()
	defer r.timer.Stop()
	return r.row.Scan(rawScan(dest))
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
	if decodeInto(m, r.fields, r.values, dest) {
		return nil
	}
	return pgx.ScanRow(m, r.fields, r.values, dest...)
}
