package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every command that takes --rerun-pending-after said in its help's text
// "default 15m" and in its flag line "(default 15m0s)" (status's
// --reconciling-after: "default 1h", then "(default 1h0m0s)"): Go's form,
// in text a person reads at 3 a.m. The flag lines now say the default as
// typed, as every printed command carries it; the flag still parses any
// Go duration and the printed commands keep working.
func TestHelpSaysDurationDefaultsAsTyped(t *testing.T) {
	goForm := regexp.MustCompile(`\d+[hm]0[ms]`)
	for _, c := range [][]string{
		{"status"}, {"list"}, {"inspect"}, {"idempotency", "list"}, {"idempotency", "inspect"}, {"serve"},
	} {
		r := runBin(t, nil, nil, append(c, "--help")...)
		requireCode(t, r, exitOK)
		require.Regexp(t, `--rerun-pending-after duration +[^\n]*\(default 15m\)\n`, r.stdout, "%v", c)
		require.NotRegexp(t, goForm, r.stdout, "%v", c)
	}
	r := runBin(t, nil, nil, "status", "--help")
	require.Regexp(t, `--reconciling-after duration +[^\n]*\(default 1h\)\n`, r.stdout)
}
