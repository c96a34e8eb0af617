package sentinel

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// decodeOne decodes every value the library's rows carry exactly as pgx's
// generic scan does, and leaves to that scan (reports false) every value
// it would refuse or convert otherwise: NULL into a non-pointer, infinite
// or out-of-range times, arrays with NULLs or of other shapes, malformed
// lengths, other types and forms.
func TestDecodeIntoAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	at := time.Date(2026, 11, 27, 13, 14, 15, 123456000, time.UTC)
	before := time.Date(1969, 7, 20, 20, 17, 40, 999999000, time.UTC)
	type value struct {
		oid  uint32
		v    any // nil: NULL
		raw  []byte
		form int16
	}
	enc := func(oid uint32, v any) value {
		if v == nil {
			return value{oid: oid, form: pgtype.BinaryFormatCode}
		}
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatalf("encode %v as %d: %v", v, oid, err)
		}
		if b == nil {
			b = []byte{} // a value of no bytes, not NULL
		}
		return value{oid: oid, v: v, raw: b, form: pgtype.BinaryFormatCode}
	}
	text := func(v string) value {
		return value{oid: pgtype.TextOID, v: v, raw: []byte(v), form: pgtype.TextFormatCode}
	}
	raw := func(oid uint32, b []byte) value {
		return value{oid: oid, v: "raw", raw: b, form: pgtype.BinaryFormatCode}
	}
	dests := map[string]func() any{
		"*string": func() any { return new(string) }, "**string": func() any { return new(*string) },
		"*State": func() any { return new(State) },
		"*int":   func() any { return new(int) }, "**int": func() any { return new(*int) },
		"*int64": func() any { return new(int64) }, "**int64": func() any { return new(*int64) },
		"*bool": func() any { return new(bool) }, "**bool": func() any { return new(*bool) },
		"*time.Time": func() any { return new(time.Time) }, "**time.Time": func() any { return new(*time.Time) },
		"*time.Duration": func() any { return new(time.Duration) },
		"*[]byte":        func() any { return new([]byte) }, "*[]int64": func() any { return new([]int64) },
	}
	cases := []struct {
		val   value
		dests []string // destinations decodeOne must decode (the others: it may decline)
	}{
		{enc(pgtype.TextOID, "claimed"), []string{"*string", "**string", "*State"}},
		{enc(pgtype.TextOID, ""), []string{"*string", "**string", "*State"}},
		{enc(pgtype.TextOID, "ключ 🔑"), []string{"*string", "**string"}},
		{text("executing"), []string{"*string", "**string", "*State"}},
		{enc(pgtype.VarcharOID, "v"), []string{"*string", "**string"}},
		{enc(pgtype.TextOID, nil), []string{"**string"}},
		{enc(pgtype.Int4OID, int32(-7)), []string{"*int", "**int", "*int64", "**int64"}},
		{enc(pgtype.Int4OID, int32(math.MaxInt32)), []string{"*int", "*int64"}},
		{enc(pgtype.Int2OID, int16(-300)), []string{"*int", "*int64"}},
		{enc(pgtype.Int8OID, int64(math.MinInt64)), []string{"*int", "**int", "*int64", "**int64"}},
		{enc(pgtype.Int8OID, int64(1)<<40), []string{"*int64", "**int64"}},
		{enc(pgtype.Int8OID, nil), []string{"**int", "**int64"}},
		{enc(pgtype.Int4OID, nil), []string{"**int", "**int64"}},
		{enc(pgtype.BoolOID, true), []string{"*bool", "**bool"}},
		{enc(pgtype.BoolOID, false), []string{"*bool", "**bool"}},
		{enc(pgtype.BoolOID, nil), []string{"**bool"}},
		{enc(pgtype.TimestamptzOID, at), []string{"*time.Time", "**time.Time"}},
		{enc(pgtype.TimestamptzOID, before), []string{"*time.Time", "**time.Time"}},
		{enc(pgtype.TimestamptzOID, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)), []string{"*time.Time"}},
		{enc(pgtype.TimestamptzOID, nil), []string{"**time.Time"}},
		{enc(pgtype.TimestamptzOID, pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}), nil},
		{enc(pgtype.TimestamptzOID, pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}), nil},
		{enc(pgtype.IntervalOID, pgtype.Interval{Microseconds: -5, Days: 3, Months: 2, Valid: true}), []string{"*time.Duration"}},
		{enc(pgtype.IntervalOID, 90*time.Minute+7*time.Microsecond), []string{"*time.Duration"}},
		{enc(pgtype.IntervalOID, nil), nil},
		{enc(pgtype.ByteaOID, []byte(`{"id":"pay_1"}`)), []string{"*[]byte"}},
		{enc(pgtype.ByteaOID, []byte{}), []string{"*[]byte"}},
		{enc(pgtype.ByteaOID, nil), []string{"*[]byte"}},
		{enc(pgtype.Int8ArrayOID, []int64{7, -1, math.MaxInt64}), []string{"*[]int64"}},
		{enc(pgtype.Int8ArrayOID, []int64{}), []string{"*[]int64"}},
		{enc(pgtype.Int8ArrayOID, nil), []string{"*[]int64"}},
		{enc(pgtype.Int8ArrayOID, []*int64{nil}), nil},
		{raw(pgtype.Int4OID, []byte{1, 2, 3}), nil},
		{raw(pgtype.Int8OID, []byte{1}), nil},
		{raw(pgtype.TimestamptzOID, []byte{1, 2}), nil},
		{raw(pgtype.IntervalOID, make([]byte, 15)), nil},
		{raw(pgtype.BoolOID, []byte{1, 1}), nil},
		{raw(pgtype.Int8ArrayOID, []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1}), nil},
		{value{oid: pgtype.Int4OID, v: "text", raw: []byte("12"), form: pgtype.TextFormatCode}, nil},
		{value{oid: pgtype.NumericOID, v: "n", raw: []byte("12"), form: pgtype.TextFormatCode}, nil},
	}
	for _, c := range cases {
		must := map[string]bool{}
		for _, d := range c.dests {
			must[d] = true
		}
		for name, mk := range dests {
			ours, theirs := mk(), mk()
			ok := decodeOne(c.val.oid, c.val.form, c.val.raw, ours)
			if must[name] && !ok {
				t.Errorf("%d %v into %s: not decoded", c.val.oid, c.val.v, name)
			}
			if !ok {
				continue
			}
			if err := m.Scan(c.val.oid, c.val.form, c.val.raw, theirs); err != nil {
				t.Errorf("%d %v into %s: decoded, but pgx refuses it: %v", c.val.oid, c.val.v, name, err)
				continue
			}
			if !reflect.DeepEqual(ours, theirs) {
				t.Errorf("%d %v into %s: %#v, pgx %#v", c.val.oid, c.val.v, name, reflect.ValueOf(ours).Elem().Interface(),
					reflect.ValueOf(theirs).Elem().Interface())
			}
		}
	}
	// A destination it does not know, and a row whose shape differs from
	// the destinations, go to pgx.
	if decodeOne(pgtype.Int4OID, pgtype.BinaryFormatCode, []byte{0, 0, 0, 1}, new(int32)) {
		t.Error("*int32 decoded")
	}
	if decodeInto(m, nil, [][]byte{{1}}, []any{new(bool)}) || decodeInto(nil, nil, nil, nil) {
		t.Error("a row of another shape, or without a type map, decoded")
	}
}
