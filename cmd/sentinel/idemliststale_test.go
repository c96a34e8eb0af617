package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// idempotency list showed an HTTP request rerun pending whose lease ended
// an hour ago (no repeat came back: status --exit-code pages on it) the
// same as one whose lease ended a second ago (the client's repeat may
// still come). It now takes --rerun-pending-after (default 15m, as
// status's), marks the stale ones as needing an operator (text: the state
// word; --json: "needs_operator", as status's "attention"), lists them
// after the uncertain ones, and prints the idempotency inspect command of
// each, carrying the threshold when it is not the default.
func TestIdempotencyListMarksStaleRerunPending(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.rerunPendingAged(pay, idempotency.ExecutionKey("cus 1", "k-old"))
	e.rerunPending(pay, idempotency.ExecutionKey("cus 1", "k-new"))
	e.uncertainKey(pay, idempotency.ExecutionKey("cus 2", "k-unc"))

	type key struct {
		Key           string `json:"key"`
		Uncertain     bool   `json:"uncertain"`
		RerunPending  bool   `json:"rerun_pending"`
		NeedsOperator *bool  `json:"needs_operator"`
	}
	read := func(args ...string) map[string]key {
		t.Helper()
		r := e.run(append([]string{"idempotency", "list", "--json"}, args...)...)
		requireCode(t, r, exitOK)
		var out struct{ Keys []key }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		m := map[string]key{}
		for _, k := range out.Keys {
			require.NotNil(t, k.NeedsOperator, r.stdout)
			m[k.Key] = k
		}
		require.Len(t, m, 3, r.stdout)
		return m
	}
	// At the default 15m, neither rerun pending key is stale.
	m := read()
	require.True(t, *m["k-unc"].NeedsOperator)
	require.False(t, *m["k-old"].NeedsOperator)
	require.False(t, *m["k-new"].NeedsOperator)
	// At 10m, the one whose lease ended 12 minutes ago is.
	m = read("--rerun-pending-after", "10m")
	require.True(t, *m["k-unc"].NeedsOperator)
	require.True(t, m["k-old"].RerunPending)
	require.True(t, *m["k-old"].NeedsOperator)
	require.False(t, *m["k-new"].NeedsOperator)

	// The text: the state says so, it comes after the uncertain key and
	// before the other rerun pending one, and its inspect line carries
	// the threshold and prints the steps.
	r := e.run("idempotency", "list", "--rerun-pending-after", "10m")
	requireCode(t, r, exitOK)
	require.Regexp(t, `(?s)k-unc.*executing \(rerun pending, needs an operator: attempt 1 of 3 stopped, no repeat of the request came back for more than 10m\).*k-old.*k-new`, r.stdout)
	require.NotRegexp(t, `needs an operator[^\n]*k-new`, r.stdout)
	line := findCommand(t, r.stdout, "sentinel idempotency inspect k-old")
	require.Equal(t, "sentinel idempotency inspect k-old --scope 'cus 1' -n payments --rerun-pending-after 10m --schema "+e.schema, line)
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `next: its lease ended 12m\d+s ago and no repeat of the request came back`, p.stdout)
	require.NotContains(t, r.stdout, "sentinel idempotency inspect k-new")

	r = e.run("idempotency", "list")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "needs an operator")
	require.NotContains(t, r.stdout, "sentinel idempotency inspect k-old")

	for _, d := range []string{"0s", "-5m"} {
		r = e.run("idempotency", "list", "--rerun-pending-after", d)
		requireCode(t, r, exitUsage)
		require.Regexp(t, `--rerun-pending-after \S+: give a duration of more than 0 \(such as 15m\)`, r.stderr)
		require.Contains(t, r.stderr, "sentinel idempotency list --help")
	}
	h := e.run("idempotency", "list", "--help")
	requireCode(t, h, exitOK)
	require.Contains(t, h.stdout, "--rerun-pending-after")
	require.Contains(t, h.stdout, "needs_operator")
}
