// Package names holds the checks package sentinel makes of the names
// (keys, groups, resources, namespaces, the schema) and follow cursors it
// is given, so that cmd/sentinel can make the same checks before it
// connects (a bad command line is refused at once, with the database down
// or its URL broken) without widening package sentinel's API. Each check
// returns why the value is refused, "" when it is accepted; package
// sentinel wraps the reason in its InvalidError.
package names

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxSchemaLen is PostgreSQL's identifier limit (NAMEDATALEN-1), the
// longest schema name accepted.
const MaxSchemaLen = 63

// Name is why s is not a name of at most maxLen bytes: empty, too long,
// not UTF-8, or holding a NUL byte.
func Name(s string, maxLen int) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > maxLen:
		return fmt.Sprintf("is %d bytes, the limit is %d", len(s), maxLen)
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.ContainsRune(s, 0):
		return "must not contain NUL bytes"
	}
	return ""
}

// Namespace is why ns is not a namespace of at most maxLen bytes: as Name,
// and no control characters.
func Namespace(ns string, maxLen int) string {
	if why := Name(ns, maxLen); why != "" {
		return why
	}
	for _, r := range ns {
		if r < 0x20 || r == 0x7f {
			return fmt.Sprintf("must not contain control characters, got %q", ns)
		}
	}
	return ""
}

// Schema is why s is not a schema name: 1..MaxSchemaLen bytes of UTF-8
// without NUL.
func Schema(s string) string {
	if s == "" || len(s) > MaxSchemaLen || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return fmt.Sprintf("must be 1..%d bytes of UTF-8 without NUL, got %q", MaxSchemaLen, s)
	}
	return ""
}

// Text is why s is not text a text column stores as given: not UTF-8,
// or holding a NUL byte.
func Text(s string) string {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Sprintf("must be UTF-8 without NUL bytes, got %q", s)
	}
	return ""
}

// Cursor parses a follow cursor: an event ID, then for a cursor a
// follower wrote (exact) ":" and the ranges of IDs below it not seen yet,
// ascending, "lo" or "lo-hi", comma-separated. It refuses text longer than
// maxLen bytes, more than maxRanges ranges and ranges covering more than
// maxIDs IDs in all; why is "" when s is accepted.
func Cursor(s string, maxLen, maxRanges int, maxIDs int64) (id int64, gaps [][2]int64, exact bool, why string) {
	if len(s) > maxLen {
		return 0, nil, false, fmt.Sprintf("longer than %d bytes", maxLen)
	}
	head, tail, exact := strings.Cut(s, ":")
	id, err := strconv.ParseInt(head, 10, 64)
	if err != nil || id < 0 || head != strconv.FormatInt(id, 10) {
		return 0, nil, false, "not an event ID"
	}
	if tail == "" {
		return id, nil, exact, ""
	}
	prev, ids := int64(0), int64(0)
	for _, part := range strings.Split(tail, ",") {
		if len(gaps) == maxRanges {
			return 0, nil, false, fmt.Sprintf("more than %d ranges of IDs not seen", maxRanges)
		}
		los, his, isRange := strings.Cut(part, "-")
		lo, err1 := strconv.ParseInt(los, 10, 64)
		hi := lo
		var err2 error
		if isRange {
			hi, err2 = strconv.ParseInt(his, 10, 64)
		}
		if err1 != nil || err2 != nil || lo <= prev || hi < lo || hi >= id {
			return 0, nil, false, "malformed range " + strconv.Quote(part)
		}
		if hi-lo >= maxIDs-ids {
			return 0, nil, false, fmt.Sprintf("its ranges of IDs not seen cover more than %d IDs", maxIDs)
		}
		gaps = append(gaps, [2]int64{lo, hi})
		prev, ids = hi, ids+hi-lo+1
	}
	return id, gaps, exact, ""
}
