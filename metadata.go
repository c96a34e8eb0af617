package sentinel

// This file: an event's metadata (jsonb) decoded without losing a number.

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
	"strings"
)

// decodeMetadata decodes an event's metadata column as encoding/json
// decodes a JSON object into map[string]any (nil for SQL NULL), with one
// difference: a number float64 cannot hold (an integer beyond 2^53 such as
// 1234567890123456789, more significant digits than float64 keeps, or out
// of its range) is a json.Number holding its exact text, not the nearest
// float64. Every other number is a float64, as before. A value read here
// and encoded again is the value that was stored: fn's result in a
// completion_refused event, which an operator stores with ForceComplete
// (sentinel inspect and reconcile print it in the force-complete command;
// the console uses it in one click), must not become another number.
func decodeMetadata(b []byte) (map[string]any, error) {
	if b == nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	for k, v := range m {
		m[k] = exactNumbers(v)
	}
	return m, nil
}

// exactNumbers replaces, in a value decoded with UseNumber, every number
// float64 holds exactly (as encoding/json writes it back) by that float64,
// and leaves the others as json.Number.
func exactNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = exactNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = exactNumbers(e)
		}
	case json.Number:
		if f, ok := floatExactly(string(v)); ok {
			return f
		}
	}
	return v
}

// floatExactly returns the float64 of the JSON number s when encoding/json
// would write that float64 back as the same number (12.50 as 12.5, 1e2 as
// 100, 0.1 as 0.1), and false when it would write another one.
func floatExactly(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false // out of float64's range
	}
	if shortInteger(s) {
		return f, true // below 2^53: every such integer is a float64
	}
	back, err := json.Marshal(f)
	if err != nil {
		return 0, false
	}
	want, ok1 := new(big.Rat).SetString(s)
	got, ok2 := new(big.Rat).SetString(string(back))
	return f, ok1 && ok2 && want.Cmp(got) == 0
}

// shortInteger reports whether s is an integer of at most 15 digits (a
// token, a pid, an attempt): below 2^53, so float64 holds it exactly.
func shortInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || len(s) > 15 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
