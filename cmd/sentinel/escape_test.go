package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestEsc(t *testing.T) {
	for in, want := range map[string]string{
		"plain key-1/ä":        "plain key-1/ä",
		"a\nvault 1":           `a\nvault 1`,
		"\x1b[8mhidden\x1b[0m": `\x1b[8mhidden\x1b[0m`,
		"tab\there\r":          `tab\there\r`,
		"bidi\u202egnp.exe":    `bidi\u202egnp.exe`,
		"c1\u009bx":            `c1\x9bx`,
		"bad\xffutf8":          `bad\xffutf8`,
		"zero\u200bwidth":      `zero\u200bwidth`,
		`back\slash`:           `back\slash`,
	} {
		require.Equal(t, want, esc(in), "%q", in)
		require.Equal(t, want, esc(esc(in)), "idempotent: %q", in)
	}
}

// A program taking a turn puts newlines and terminal escapes in its label,
// another in a lease key: the human output shows them escaped, on one
// line, and --json keeps them as they are.
func TestHumanOutputEscapesControlCharacters(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	const evil = "nightly\nvault 1\nops-approved 1\x1b[8m"
	turn, err := e.client.Turn(ctxT(t), "printer", sentinel.WithLabel(evil))
	require.NoError(t, err)
	defer func() { _ = turn.Release(ctxT(t)) }()
	l, err := e.client.Lease(ctxT(t), "job\nforged 1\x1b[8m")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()

	checkClean := func(r result) {
		t.Helper()
		requireCode(t, r, exitOK)
		for _, out := range []string{r.stdout, r.stderr} {
			require.NotContains(t, out, "\x1b")
			for _, line := range strings.Split(out, "\n") {
				require.False(t, strings.HasPrefix(line, "vault 1") || strings.HasPrefix(line, "ops-approved") ||
					strings.HasPrefix(line, "forged 1"), "forged line %q in\n%s", line, out)
			}
		}
	}
	r := e.run("queue", "status")
	checkClean(r)
	require.Contains(t, r.stdout, `nightly\nvault 1\nops-approved 1\x1b[8m`)
	r = e.run("queue", "follow", "--after", "0", "--count", "1")
	checkClean(r)
	require.Contains(t, r.stdout, `nightly\nvault 1`)
	r = e.run("leases")
	checkClean(r)
	require.Contains(t, r.stdout, `job\nforged 1\x1b[8m`)

	r = e.run("queue", "status", "--json")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `"label": "nightly\nvault 1\nops-approved 1\u001b[8m"`)
}
