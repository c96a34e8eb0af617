package idempotency

// This file: The request's fingerprint (method, path and query, body digest) and the canonical JSON form Options.CanonicalJSON digests.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// fingerprint digests what makes two requests "the same": method, path and
// query, and body.
func fingerprint(r *http.Request, body []byte, canonicalJSON bool) string {
	h := sha256.New()
	bd := sha256.Sum256(body)
	if canonicalJSON && isJSON(r.Header.Get("Content-Type")) {
		if c, ok := canonical(body); ok {
			// Marked apart, so no canonical digest equals a raw one.
			bd = sha256.Sum256(append([]byte("canonical-json\n"), c...))
		}
	}
	fmt.Fprintf(h, "%s\n%s\n%x", r.Method, r.URL.RequestURI(), bd)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// isJSON reports whether a Content-Type is application/json or +json.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// canonical re-encodes a JSON document with sorted object members, no
// insignificant whitespace and numbers as written. ok is false for a body
// that has no canonical form: invalid JSON, or an object with two member
// names equal under case folding (see foldedTwice).
func canonical(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	if foldedTwice(body) {
		return nil, false
	}
	b, err := json.Marshal(v)
	return b, err == nil
}

// foldedTwice reports whether a valid JSON document has, at any depth, an
// object with two member names equal under case folding as encoding/json
// folds them (bytes.EqualFold), a name given twice included. Decoded into
// a map both members are kept (or the last, for equal names), into a
// struct the last one wins: {"amount":100,"Amount":200} and the same
// members swapped mean different things to a handler, and must not share
// a fingerprint. It walks the tokens with a stack of its own, so nesting
// costs no Go stack.
func foldedTwice(body []byte) bool {
	type frame struct {
		seen    map[string]struct{} // folded member names; nil for an array
		wantKey bool                // the object's next token is a member name (or its end)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // io.EOF: the end of the document
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.seen != nil && top.wantKey {
			name := foldName(tok.(string))
			if _, dup := top.seen[name]; dup {
				return true
			}
			top.seen[name] = struct{}{}
			top.wantKey = false
			continue
		}
		if top != nil && top.seen != nil {
			top.wantKey = true // after this value, a name
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{seen: map[string]struct{}{}, wantKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		}
	}
}

// foldName folds a member name as encoding/json matches names to fields:
// ASCII letters to upper case, every other rune to the smallest rune of
// its simple folding orbit, so that foldName(a) == foldName(b) exactly
// when bytes.EqualFold(a, b).
func foldName(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
			b.WriteRune(r)
			continue
		}
		for {
			next := unicode.SimpleFold(r)
			if next <= r {
				r = next
				break
			}
			r = next
		}
		b.WriteRune(r)
	}
	return b.String()
}

// requestPath is a request's path as recorded with its claim: the path
// (decoded) and, when there is one, the query as sent, which the
// fingerprint covers too.
func requestPath(u *url.URL) string {
	if u.RawQuery == "" {
		return u.Path
	}
	return u.Path + "?" + u.RawQuery
}
