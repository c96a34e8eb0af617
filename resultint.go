package sentinel

// This file: the integers of a result type as Go decodes them, beyond
// what JSON Schema's "integer" says.

import (
	"encoding/json"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

// Bounds of the integers a Go integer type can hold: int64's least,
// uint64's greatest.
var (
	minGoInt = big.NewInt(math.MinInt64)
	maxGoInt = new(big.Int).SetUint64(math.MaxUint64)
)

// goIntegers checks, in an instance that matched sch, every number at a
// place whose schema allows an integer and no other number: JSON Schema
// calls 500.0 and 5e2 integers, but encoding/json decodes neither into a
// Go integer field, nor an integer beyond int64 and uint64. Such a value,
// accepted from an operator (ForceComplete, SetResult, sentinel
// force-complete, the console), would be stored as completed while every
// caller got ErrResult for it. It returns the instance location and the
// reason of the first such number, or ok.
func goIntegers(sch *validator.Schema, inst any, loc []string, depth int) (bad []string, reason string, ok bool) {
	if sch == nil || depth > 64 {
		return nil, "", true
	}
	if sch.Ref != nil {
		if bad, reason, ok := goIntegers(sch.Ref, inst, loc, depth+1); !ok {
			return bad, reason, false
		}
	}
	for _, s := range sch.AllOf {
		if bad, reason, ok := goIntegers(s, inst, loc, depth+1); !ok {
			return bad, reason, false
		}
	}
	// anyOf, oneOf: the value fits a Go type if it fits one branch (a
	// pointer's root is anyOf null and the type).
	for _, alts := range [][]*validator.Schema{sch.AnyOf, sch.OneOf} {
		if len(alts) == 0 {
			continue
		}
		var first []string
		var firstReason string
		fits := false
		for _, s := range alts {
			bad, reason, ok := goIntegers(s, inst, loc, depth+1)
			if ok {
				fits = true
				break
			}
			if first == nil {
				first, firstReason = bad, reason
			}
		}
		if !fits {
			return first, firstReason, false
		}
	}
	switch v := inst.(type) {
	case json.Number:
		if sch.Types == nil || !slices.Equal(sch.Types.ToStrings(), []string{"integer"}) {
			return nil, "", true
		}
		s := string(v)
		if strings.ContainsAny(s, ".eE") {
			return loc, "an integer is written without a fraction or an exponent (" + s + "): a Go integer field cannot take it", false
		}
		n, isInt := new(big.Int).SetString(s, 10)
		if !isInt || n.Cmp(minGoInt) < 0 || n.Cmp(maxGoInt) > 0 {
			return loc, "integer out of the range of Go's integer types (" + s + ")", false
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			s := sch.Properties[k]
			if s == nil {
				s, _ = sch.AdditionalProperties.(*validator.Schema)
			}
			if bad, reason, ok := goIntegers(s, v[k], append(slices.Clone(loc), k), depth+1); !ok {
				return bad, reason, false
			}
		}
	case []any:
		item := sch.Items2020
		if item == nil {
			item, _ = sch.Items.(*validator.Schema)
		}
		for i, e := range v {
			s := item
			if i < len(sch.PrefixItems) {
				s = sch.PrefixItems[i]
			}
			if bad, reason, ok := goIntegers(s, e, append(slices.Clone(loc), strconv.Itoa(i)), depth+1); !ok {
				return bad, reason, false
			}
		}
	}
	return nil, "", true
}
