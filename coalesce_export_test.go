package sentinel

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Coalescer kinds, for tests.
const (
	CoAcquire = int(coAcquire)
	CoRelease = int(coRelease)
	CoClaim   = int(coClaim)
	CoFinish  = int(coFinish)
)

// HoldCoalescer makes the lanes of kinds busy in c's coalescer, as if
// statements of those kinds were in flight, so callers queue. queued
// reports a kind's queue length; release lands the held lanes, sending
// what queued.
func HoldCoalescer(c *Client, kinds ...int) (queued func(kind int) int, release func()) {
	co := c.co
	co.noSpare.Store(true)
	for _, k := range kinds {
		ln := &co.lanes[k]
		ln.mu.Lock()
		ln.inflight += co.inFlight
		ln.mu.Unlock()
	}
	queued = func(kind int) int {
		ln := &co.lanes[kind]
		ln.mu.Lock()
		defer ln.mu.Unlock()
		return len(ln.queue)
	}
	release = func() {
		defer co.noSpare.Store(false)
		for _, k := range kinds {
			for range co.inFlight {
				co.landed(coKind(k))
			}
		}
	}
	return queued, release
}

// CoQueryRow sends a statement through c's coalescer as kind.
func CoQueryRow(ctx context.Context, c *Client, kind int, sql string, args ...any) pgx.Row {
	return c.co.queryRow(ctx, ctx, coKind(kind), sql, args...)
}

// CoSets reports how many set statements c's coalescer sent.
func CoSets(c *Client) int64 { return c.co.sets.Load() }

// ClaimSQL is c's single claim statement (sqlClaim).
func ClaimSQL(c *Client) string { return c.exe.claim }

// CoRead is the coalescer kind of a Once key's read.
const CoRead = int(coRead)

// CoMaxBytes is a batch's bound on argument bytes.
const CoMaxBytes = coMaxBytes

// ScanClaim reads a row of the claim statement (single or set), as Once
// does.
func ScanClaim(row pgx.Row, ns, key string, state State, owner, host string, pid int) (*Execution, bool, error) {
	return scanClaim(row, ns, key, state, owner, host, pid)
}

// RemainingForTest is the lease time left that e was read with.
func RemainingForTest(e *Execution) time.Duration { return e.remaining }

// SetRemainingForTest sets e's lease time left.
func SetRemainingForTest(e *Execution, d time.Duration) { e.remaining = d }

// ReadSQL is c's read of one key's row (sqlReadExecution).
func ReadSQL(c *Client) string { return c.exe.read }

// FastRow is row as the library's own rows scan: decoded from the raw
// values when they are in the plain binary form (rowdecode.go).
func FastRow(row pgx.Row) pgx.Row { return fastRow{row} }

// ScanExecution reads a row of execCols, as the library does.
func ScanExecution(row pgx.Row) (*Execution, error) { return scanExecution(row) }

// DecodesRaw reports whether the current row of rows, the claim
// statement's (claim) or execCols, is decoded from its raw values.
func DecodesRaw(rows pgx.Rows, claim bool) bool {
	var dest []any
	if claim {
		dest = new(claimCols).dest()
	} else {
		dest = execDest(new(Execution), new(execNulls))
	}
	return decodeInto(rows.Conn().TypeMap(), rows.FieldDescriptions(), rows.RawValues(), dest)
}
