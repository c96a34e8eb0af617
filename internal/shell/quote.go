// Package shell quotes words for a POSIX shell, for the command lines
// Sentinel prints for a person to run.
package shell

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Quote returns s as one word of a shell command line: unchanged when it
// holds only characters no shell treats specially (letters, digits and
// -_.:/@=,+%), in single quotes otherwise (a quote inside closes them, is
// escaped and reopens them), and, when it holds
// control or format characters or invalid UTF-8 (a newline would end the
// line, an escape sequence would reach the terminal), in ANSI-C quotes
// ($'a\nb'), which bash, zsh, ksh and POSIX.1-2024 shells read back as s.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	plain, printable := true, true
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				printable = false
			}
		}
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			printable = false
		}
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@=,+%", r)) {
			plain = false
		}
	}
	switch {
	case plain:
		return s
	case printable:
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\'' || r == '\\':
			b.WriteString(`\` + string(r))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp):
			// \x would continue with the next hex digit: write the bytes.
			for _, c := range []byte(string(r)) {
				fmt.Fprintf(&b, `\x%02x`, c)
			}
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteString("'")
	return b.String()
}
