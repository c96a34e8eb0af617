package idempotency

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// Issue 26.10: members equal under case folding, at any depth, have no
// canonical form.
func TestCanonicalRefusesMembersEqualUnderFolding(t *testing.T) {
	for _, body := range []string{
		`{"amount":100,"Amount":200}`,
		`{"Amount":200,"amount":100}`,
		`{"a":1,"a":2}`,
		`{"x":[{"ok":1},{"meta":{"k":1,"K":2}}]}`,
		`{"\u212a":1,"k":2}`, // the Kelvin sign folds to k
		`{"ſ":1,"S":2}`,      // long s folds to s
		`[{"b":{},"B":[]}]`,
	} {
		if c, ok := canonical([]byte(body)); ok {
			t.Errorf("%s: canonical form %s, want none (fingerprint the bytes)", body, c)
		}
	}
	for _, body := range []string{
		`{"amount":100,"currency":"eur"}`,
		`{"a":{"a":{"a":1}},"b":[{"a":1},{"a":2}]}`, // the same name in different objects
		`{"k":{"K":1}}`,
		`[1,"a","A",{"ab":1,"aB2":2}]`,
		`"x"`,
		`{}`,
	} {
		if _, ok := canonical([]byte(body)); !ok {
			t.Errorf("%s: no canonical form, want one", body)
		}
	}
}

// The canonical form decodes, with encoding/json, to what the body
// decodes to, in a map and in a struct matched in any case: two bodies
// with one fingerprint mean the same to a handler.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{
		`{"amount":100,"Amount":200}`, `{"amount":4200,"currency":"eur","meta":{"x":[1,2.50]}}`,
		`{"a":1,"a":2}`, `{"Meta":{"x":1,"X":2}}`, `[{"amount":1}]`, `{"\u212a":1,"k":2}`, `{"amount":1e3}`,
	} {
		f.Add([]byte(s))
	}
	type target struct {
		Amount   any
		Currency any
		K        any
		Meta     struct{ X any }
	}
	decode := func(b []byte, v any) error {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		return dec.Decode(v)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, ok := canonical(body)
		if !ok {
			return
		}
		if again, ok := canonical(c); !ok || !bytes.Equal(again, c) {
			t.Fatalf("%q: canonical form %q is not its own canonical form (%q, %v)", body, c, again, ok)
		}
		var m1, m2 any
		if err := decode(body, &m1); err != nil {
			t.Fatalf("%q has a canonical form but does not decode: %v", body, err)
		}
		if err := decode(c, &m2); err != nil || !reflect.DeepEqual(m1, m2) {
			t.Fatalf("%q and its canonical form %q decode differently: %v / %v (%v)", body, c, m1, m2, err)
		}
		var s1, s2 target
		e1, e2 := decode(body, &s1), decode(c, &s2)
		if (e1 == nil) != (e2 == nil) || !reflect.DeepEqual(s1, s2) {
			t.Fatalf("%q and its canonical form %q decode into a struct differently: %+v (%v) / %+v (%v)", body, c, s1, e1, s2, e2)
		}
	})
}
