package shell

import (
	"os/exec"
	"testing"
)

// Every quoted word reads back as itself in a real shell.
func TestQuoteRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	for _, s := range []string{"plain-key_1.2:3/4@x=y", "", "with space", "it's", `back\slash`, "a\nb", "tab\there", "esc\x1b[31m",
		"café", "\u202eevil", "bad\xffutf8", "'\n'", "$HOME", "`id`", "a\x7fb", "\u0085next"} {
		q := Quote(s)
		out, err := exec.Command(sh, "-c", "printf %s "+q).Output()
		if err != nil || string(out) != s {
			t.Errorf("Quote(%q) = %s read back as %q (%v)", s, q, out, err)
		}
	}
	if got := Quote("pay-1"); got != "pay-1" {
		t.Errorf("a plain word was quoted: %s", got)
	}
}
