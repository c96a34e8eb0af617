package idempotency

// This file: ParseKey, the Idempotency-Key header field decoded (a Structured Field String or a bare token) and its length bound.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest accepted Idempotency-Key, in bytes after
// decoding a quoted key.
const MaxKeyLen = 255

// ParseKey decodes the value of an Idempotency-Key header field. The draft
// (draft-ietf-httpapi-idempotency-key-header) defines the field as a
// Structured Field String, e.g. "8e03978e-40d5-43e8-bc93-6894a57f9324" in
// double quotes; Stripe and most clients send the bare value. Both are
// accepted:
//
//   - a quoted sf-string: printable ASCII (0x20-0x7E), with \" and \\ the
//     only escapes;
//   - a bare value: one or more token characters (RFC 9110 tchar) or ':'
//     and '/'. This is the sf-token grammar, except that a leading digit is
//     allowed so that bare UUIDs work.
//
// The decoded key must be 1 to MaxKeyLen bytes. Parameters (";a=1") and
// lists are rejected.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", errors.New("the Idempotency-Key header is empty: send a unique value (for example a UUID) and reuse it when retrying the same request")
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		for ; i < len(v); i++ {
			c := v[i]
			switch {
			case c == '\\':
				i++
				if i == len(v) || (v[i] != '"' && v[i] != '\\') {
					return "", errors.New(`the quoted Idempotency-Key has a bad escape: only \" and \\ are allowed`)
				}
				b.WriteByte(v[i])
			case c == '"':
				if i != len(v)-1 {
					return "", errors.New("the Idempotency-Key has characters after its closing quote (parameters are not supported)")
				}
				key = b.String()
				if key == "" {
					return "", errors.New("the Idempotency-Key is an empty string")
				}
				return checkLen(key)
			case c < 0x20 || c > 0x7e:
				return "", fmt.Errorf("the quoted Idempotency-Key contains %s: only printable ASCII is allowed", describeAt(v, i))
			default:
				b.WriteByte(c)
			}
		}
		return "", errors.New("the quoted Idempotency-Key has no closing quote")
	}
	for i := 0; i < len(v); i++ {
		if !tokenChar(v[i]) {
			return "", fmt.Errorf("the Idempotency-Key contains %s: send a token (ASCII letters, digits, !#$%%&'*+-.^_`|~:/) or a quoted string of printable ASCII",
				describeAt(v, i))
		}
	}
	return checkLen(v)
}

// describeAt names the character of s at byte i for a message: the rune
// when s holds UTF-8 there ('é', not the 'Ã' of its first byte), else the
// byte.
func describeAt(s string, i int) string {
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n <= 1 {
		return fmt.Sprintf("the byte %#x (not UTF-8)", s[i])
	}
	return strconv.QuoteRune(r)
}

func checkLen(key string) (string, error) {
	if len(key) > MaxKeyLen {
		return "", fmt.Errorf("the Idempotency-Key is %d bytes long; at most %d are allowed", len(key), MaxKeyLen)
	}
	return key, nil
}

// tokenChar reports whether c is an RFC 9110 tchar, ':' or '/'.
func tokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}
