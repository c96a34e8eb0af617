package sentinel

// This file: the library's rows read straight off the wire. For every row
// it returns pgx plans how to scan each column into its destination
// (pgtype.Map.PlanScan, per column, on every call) and then scans through
// those plans; for the rows of the hot paths (a Once's claim or read, 21
// columns; a lease's acquire, 9) the planning costs the client more than
// the decoding. The library's statements return a few built-in types into
// a few kinds of destination, so decodeInto decodes those itself, from the
// binary form, exactly as pgx's built-in codecs do; any other destination,
// type, form or value (text results under the simple protocol, a codec
// registered by the application, an infinite time) goes to pgx's generic
// scan, which then reports what it would have reported
// (TestDecodeIntoAsPgx, TestExecRowDecodedAsPgxDecodes).

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// fastRow is a pgx.Row whose Scan decodes with decodeInto when it can.
type fastRow struct{ pgx.Row }

func (r fastRow) Scan(dest ...any) error { return r.Row.Scan(rawScan(dest)) }

// rawScan is a row's destinations, as a pgx.RowScanner: pgx hands the row
// to ScanRow when it is a Scan's only destination.
type rawScan []any

func (d rawScan) ScanRow(rows pgx.Rows) error {
	var m *pgtype.Map
	if c := rows.Conn(); c != nil {
		m = c.TypeMap()
	}
	if decodeInto(m, rows.FieldDescriptions(), rows.RawValues(), d) {
		return nil
	}
	return rows.Scan(d...)
}

// decodeInto sets dest from a row's raw values and reports true when
// every destination is of a kind it decodes, every value in the form it
// reads and every codec of m pgx's own; otherwise it reports false, and
// the caller scans the row generically (which overwrites every
// destination, or reports the error pgx reports).
func decodeInto(m *pgtype.Map, fields []pgconn.FieldDescription, vals [][]byte, dest []any) bool {
	if len(fields) != len(dest) || len(vals) != len(dest) || !defaultCodecs(m) {
		return false
	}
	for i, d := range dest {
		if !decodeOne(fields[i].DataTypeOID, fields[i].Format, vals[i], d) {
			return false
		}
	}
	return true
}

// decodeOne decodes one value v of type oid in format into d, as pgx's
// built-in codecs do; false when it does not decode that combination, or
// when pgx would report an error (a NULL into a non-pointer, a malformed
// or out-of-range value).
func decodeOne(oid uint32, format int16, v []byte, d any) bool {
	text := oid == pgtype.TextOID || oid == pgtype.VarcharOID
	binaryForm := format == pgtype.BinaryFormatCode
	switch d := d.(type) {
	case *string:
		if !text || v == nil {
			return false
		}
		*d = string(v)
	case **string:
		if !text {
			return false
		}
		if v == nil {
			*d = nil
		} else {
			s := string(v)
			*d = &s
		}
	case *State:
		if !text || v == nil {
			return false
		}
		*d = State(v)
	case *int:
		n, ok := rawInt(oid, format, v)
		if !ok || int64(int(n)) != n { // out of a 32-bit int's range: pgx reports it
			return false
		}
		*d = int(n)
	case **int:
		if v == nil {
			*d = nil
			return rawIntType(oid, format)
		}
		n, ok := rawInt(oid, format, v)
		if !ok || int64(int(n)) != n {
			return false
		}
		i := int(n)
		*d = &i
	case *int64:
		n, ok := rawInt(oid, format, v)
		if !ok {
			return false
		}
		*d = n
	case **int64:
		if v == nil {
			*d = nil
			return rawIntType(oid, format)
		}
		n, ok := rawInt(oid, format, v)
		if !ok {
			return false
		}
		*d = &n
	case *bool:
		if oid != pgtype.BoolOID || !binaryForm || len(v) != 1 {
			return false
		}
		*d = v[0] == 1
	case **bool:
		if oid != pgtype.BoolOID || !binaryForm || (v != nil && len(v) != 1) {
			return false
		}
		if v == nil {
			*d = nil
		} else {
			b := v[0] == 1
			*d = &b
		}
	case *time.Time:
		if oid != pgtype.TimestamptzOID || !binaryForm {
			return false
		}
		t, ok := rawTime(v)
		if !ok {
			return false
		}
		*d = t
	case **time.Time:
		if oid != pgtype.TimestamptzOID || !binaryForm {
			return false
		}
		if v == nil {
			*d = nil
			return true
		}
		t, ok := rawTime(v)
		if !ok {
			return false
		}
		*d = &t
	case *time.Duration:
		if oid != pgtype.IntervalOID || !binaryForm {
			return false
		}
		dur, ok := rawInterval(v)
		if !ok {
			return false
		}
		*d = dur
	case *[]byte:
		if oid != pgtype.ByteaOID || !binaryForm {
			return false
		}
		if v == nil {
			*d = nil
		} else {
			*d = append(make([]byte, 0, len(v)), v...)
		}
	case *[]int64:
		if oid != pgtype.Int8ArrayOID || !binaryForm {
			return false
		}
		if v == nil {
			*d = nil
			return true
		}
		a, ok := rawInt8Array(v)
		if !ok {
			return false
		}
		*d = a
	default:
		return false
	}
	return true
}

// defaultCodecs reports whether m decodes the types decodeOne reads with
// pgx's built-in codecs, as pgtype.NewMap does (a timestamptz codec with
// a scan location of the application's own converts times: not that).
func defaultCodecs(m *pgtype.Map) bool {
	if m == nil {
		return false
	}
	codec := func(oid uint32) pgtype.Codec {
		if t, ok := m.TypeForOID(oid); ok {
			return t.Codec
		}
		return nil
	}
	_, text := codec(pgtype.TextOID).(pgtype.TextCodec)
	_, varchar := codec(pgtype.VarcharOID).(pgtype.TextCodec)
	_, int2 := codec(pgtype.Int2OID).(pgtype.Int2Codec)
	_, int4 := codec(pgtype.Int4OID).(pgtype.Int4Codec)
	_, int8 := codec(pgtype.Int8OID).(pgtype.Int8Codec)
	_, boolean := codec(pgtype.BoolOID).(pgtype.BoolCodec)
	_, bytea := codec(pgtype.ByteaOID).(pgtype.ByteaCodec)
	_, interval := codec(pgtype.IntervalOID).(pgtype.IntervalCodec)
	tz, timestamptz := codec(pgtype.TimestamptzOID).(*pgtype.TimestamptzCodec)
	arr, int8Array := codec(pgtype.Int8ArrayOID).(*pgtype.ArrayCodec)
	return text && varchar && int2 && int4 && int8 && boolean && bytea && interval &&
		timestamptz && tz.ScanLocation == nil && int8Array && arr.ElementType != nil && arr.ElementType.OID == pgtype.Int8OID
}

// rawIntType reports whether rawInt reads values of type oid in format.
func rawIntType(oid uint32, format int16) bool {
	return format == pgtype.BinaryFormatCode && (oid == pgtype.Int2OID || oid == pgtype.Int4OID || oid == pgtype.Int8OID)
}

// rawInt decodes a binary smallint, integer or bigint.
func rawInt(oid uint32, format int16, v []byte) (int64, bool) {
	if !rawIntType(oid, format) {
		return 0, false
	}
	switch {
	case oid == pgtype.Int2OID && len(v) == 2:
		return int64(int16(binary.BigEndian.Uint16(v))), true
	case oid == pgtype.Int4OID && len(v) == 4:
		return int64(int32(binary.BigEndian.Uint32(v))), true
	case oid == pgtype.Int8OID && len(v) == 8:
		return int64(binary.BigEndian.Uint64(v)), true
	}
	return 0, false
}

// microsecY2K is 2000-01-01 (a binary timestamptz's origin) in µs since
// the Unix epoch.
const microsecY2K = 946_684_800 * 1_000_000

// The range of a plain time, as pgx checks it (an infinite timestamptz is
// outside it).
var (
	minPlainTime = time.Date(-4713, 11, 24, 0, 0, 0, 0, time.UTC)
	endPlainTime = time.Date(294277, 1, 1, 0, 0, 0, 0, time.UTC)
)

// rawTime decodes a binary timestamptz as pgx's codec does without a scan
// location: the instant, in time.Local. NULL and values outside the plain
// range are not decoded.
func rawTime(v []byte) (time.Time, bool) {
	if len(v) != 8 {
		return time.Time{}, false
	}
	us := int64(binary.BigEndian.Uint64(v))
	t := time.Unix(microsecY2K/1_000_000+us/1_000_000, (microsecY2K%1_000_000*1_000)+(us%1_000_000*1_000))
	if t.Before(minPlainTime) || !t.Before(endPlainTime) {
		return time.Time{}, false
	}
	return t, true
}

// rawInterval decodes a binary interval into a Duration as pgx does (a
// month is 30 days, a day 24 hours). NULL is not decoded (pgx refuses it
// for a Duration).
func rawInterval(v []byte) (time.Duration, bool) {
	if len(v) != 16 {
		return 0, false
	}
	us := int64(binary.BigEndian.Uint64(v))
	days := int64(int32(binary.BigEndian.Uint32(v[8:])))
	months := int64(int32(binary.BigEndian.Uint32(v[12:])))
	const usPerDay = 86_400_000_000
	return time.Duration(months*30*usPerDay+days*usPerDay+us) * time.Microsecond, true
}

// rawInt8Array decodes a binary one-dimensional bigint[] without NULLs
// (an empty array too); anything else is not decoded.
func rawInt8Array(v []byte) ([]int64, bool) {
	if len(v) < 12 {
		return nil, false
	}
	ndim := int32(binary.BigEndian.Uint32(v))
	hasNull := binary.BigEndian.Uint32(v[4:])
	elem := binary.BigEndian.Uint32(v[8:])
	if elem != pgtype.Int8OID || hasNull != 0 {
		return nil, false
	}
	if ndim == 0 && len(v) == 12 {
		return []int64{}, true
	}
	if ndim != 1 || len(v) < 20 {
		return nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(v[12:])))
	rest := v[20:]
	if n < 0 || len(rest) != n*12 {
		return nil, false
	}
	out := make([]int64, n)
	for i := range out {
		if int32(binary.BigEndian.Uint32(rest)) != 8 {
			return nil, false
		}
		out[i] = int64(binary.BigEndian.Uint64(rest[4:]))
		rest = rest[12:]
	}
	return out, true
}

// queryRow is c.pool.QueryRow, its row decoded by decodeInto when it can
// (for the statements on the paths that wait: a waiter's registration and
// grant, a draw, a campaign).
func (c *Client) queryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return fastRow{c.pool.QueryRow(ctx, sql, args...)}
}
