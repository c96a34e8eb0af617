package sentinel

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStorableText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":           "plain",
		"a\x00b":          `a\x00b`,
		"a\xffb":          "a\uFFFDb",
		"\xff\xfe\x00":    "\uFFFD\\x00",
		"":                "",
		"日本\x00語\xe6\x97": "日本\\x00語\uFFFD",
	} {
		if got := storableText(in); got != want {
			t.Errorf("storableText(%q) = %q, want %q", in, got, want)
		}
	}
}

// storableJSON keeps a valid document valid, leaves no \u0000 and no lone
// surrogate escape, and changes nothing else.
func FuzzStorableJSON(f *testing.F) {
	for _, s := range []string{`{"a":"\u0000"}`, `"\\u0000"`, `["\ud83d\ude00","\udc00","\ud800x"]`, `{"\u0000":1}`, `"\\\u0000"`, `{"a":[1,2,{"b":"c\"\u0000"}]}`, `"\ud800\u0000"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		out := storableJSON(b)
		if !json.Valid(out) {
			t.Fatalf("%q became invalid JSON %q", b, out)
		}
		var v any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if hasNUL(v) {
			t.Fatalf("%q: %q still holds a NUL", b, out)
		}
		if lone(out) {
			t.Fatalf("%q: %q still holds a lone surrogate escape", b, out)
		}
		if !strings.Contains(string(b), `\u`) && string(out) != string(b) {
			t.Fatalf("%q without \\u escapes was changed to %q", b, out)
		}
	})
}

// lone reports a \uD800-\uDFFF escape not part of a pair, in valid JSON.
func lone(b []byte) bool {
	s := string(b)
	for i := 0; i+5 < len(s); i++ {
		if s[i] == '\\' && s[i+1] != 'u' {
			i++
			continue
		}
		if s[i] != '\\' {
			continue
		}
		r := hex4([]byte(s[i+2 : i+6]))
		if r >= 0xd800 && r < 0xdc00 {
			if i+11 < len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if lo := hex4([]byte(s[i+8 : i+12])); lo >= 0xdc00 && lo < 0xe000 {
					i += 11
					continue
				}
			}
			return true
		}
		if r >= 0xdc00 && r < 0xe000 {
			return true
		}
		i += 5
	}
	return false
}

// hasNUL reports a NUL in a decoded JSON value's strings or member names.
func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if hasNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || hasNUL(e) {
				return true
			}
		}
	}
	return false
}
