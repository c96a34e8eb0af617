package sentinel

import (
	"errors"
	"testing"
)

// A follow cursor parses back to the position it encodes, and any text
// either parses to a well-formed position or is refused as ErrInvalid.
func FuzzFollowCursor(f *testing.F) {
	for _, s := range []string{"0", "41872", "41872:", "41872:41870", "41872:41801-41803,41870", "7:1", "5:7", "9:5,3", "x", "-1", "1:0", "3:1-1", "01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseFollowCursor(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v does not match ErrInvalid", s, err)
			}
			return
		}
		var gaps []gap
		prev := int64(0)
		for _, g := range c.gaps {
			if g[0] <= prev || g[1] < g[0] || g[1] >= c.id {
				t.Fatalf("%q: malformed gap %v accepted", s, g)
			}
			prev = g[1]
			gaps = append(gaps, gap{lo: g[0], hi: g[1]})
		}
		back, err := parseFollowCursor(encodeFollowCursor(c.id, gaps))
		if err != nil {
			t.Fatalf("%q: re-encoded cursor refused: %v", s, err)
		}
		if back.id != c.id || len(back.gaps) != len(c.gaps) {
			t.Fatalf("%q: round trip gave %+v, want %+v", s, back, c)
		}
		for i := range c.gaps {
			if back.gaps[i] != c.gaps[i] {
				t.Fatalf("%q: round trip gave %+v, want %+v", s, back, c)
			}
		}
	})
}
