package sentinel

// This file: storableText and storableJSON, the text Sentinel writes but does not control made storable (invalid UTF-8, NUL, lone surrogate escapes).

import (
	"strings"
	"unicode/utf8"
)

// Text PostgreSQL can store. A text column refuses invalid UTF-8 (SQLSTATE
// 22021) and the NUL character; jsonb also refuses the escape \u0000
// (22P05) and a lone UTF-16 surrogate escape (22P02). Sentinel writes text
// it does not control (fn's error and panic messages, an encoding error,
// metadata given by callers and operators, an HTTP request's path): a
// write refused for its text would lose the outcome it records (a Final
// error stranded the key executing). Every such text goes through
// storableText (text columns) or storableJSON (metadata) before it is
// written: invalid bytes become U+FFFD, NUL becomes the four characters
// \x00, a lone surrogate escape becomes \ufffd. Names the caller chooses
// (keys, namespaces, owners, hosts, labels, app versions) are checked
// instead and refused with ErrInvalid.

// storableText returns s as a text column stores it: invalid UTF-8 as
// U+FFFD, NUL as `\x00`.
func storableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
}

// storableJSON returns the JSON document b (valid JSON) as jsonb stores
// it: the escape \u0000 as the text \x00 (`\\x00`), a lone surrogate
// escape as \ufffd. It returns b itself when nothing needs changing.
func storableJSON(b []byte) []byte {
	var out []byte // nil until something changes
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(b) && b[i+1] != 'u':
			if out != nil {
				out = append(out, b[i:i+2]...)
			}
			i++
			continue
		case c == '\\' && i+5 < len(b):
			r := hex4(b[i+2 : i+6])
			n := 6 // bytes of the escape(s) kept as they are
			var repl string
			switch {
			case r == 0:
				repl = `\\x00`
			case r >= 0xd800 && r < 0xdc00 && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' &&
				hex4(b[i+8:i+12]) >= 0xdc00 && hex4(b[i+8:i+12]) < 0xe000:
				n = 12 // a surrogate pair
			case r >= 0xd800 && r < 0xe000:
				repl = `\ufffd`
			}
			if repl != "" && out == nil {
				out = append(make([]byte, 0, len(b)+8), b[:i]...)
			}
			if out != nil {
				if repl != "" {
					out = append(out, repl...)
				} else {
					out = append(out, b[i:i+n]...)
				}
			}
			i += n - 1
			continue
		}
		if out != nil {
			out = append(out, c)
		}
	}
	if out == nil {
		return b
	}
	return out
}

// hex4 decodes four hex digits (valid JSON guarantees them); -1 if not.
func hex4(h []byte) int {
	v := 0
	for _, c := range h {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | int(c-'0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}
