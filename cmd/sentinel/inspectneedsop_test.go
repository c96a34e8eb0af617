package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// list --json and idempotency list --json say "needs_operator" of every
// key, judged by --rerun-pending-after; inspect --json and idempotency
// inspect --json took the same flag and printed the same key without it,
// so a script reading one key could not tell what the listing and status
// --exit-code said of it. Both now carry it, judged as the listings do.
func TestInspectJSONSaysNeedsOperator(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("pay ments")
	httpKey := idempotency.ExecutionKey("cus 1's $HOME", "k-old")
	e.rerunPendingAged(pay, httpKey, "rr-old")
	e.uncertainKey(pay, "unc")

	needs := func(args ...string) bool {
		t.Helper()
		r := e.run(append(args, "--json")...)
		requireCode(t, r, exitOK)
		var out struct {
			NeedsOperator *bool `json:"needs_operator"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.NotNil(t, out.NeedsOperator, "%v: %s", args, r.stdout)
		return *out.NeedsOperator
	}
	for _, c := range []struct {
		flags []string
		stale bool
	}{{nil, false}, {[]string{"--rerun-pending-after", "10m"}, true}, {[]string{"--rerun-pending-after", "1h"}, false}} {
		require.Equal(t, c.stale, needs(append([]string{"inspect", "rr-old", "-n", "pay ments"}, c.flags...)...), "%v", c.flags)
		require.Equal(t, c.stale, needs(append([]string{"inspect", httpKey, "-n", "pay ments"}, c.flags...)...), "%v", c.flags)
		require.Equal(t, c.stale, needs(append([]string{"idempotency", "inspect", "k-old", "--scope", "cus 1's $HOME", "-n", "pay ments"}, c.flags...)...), "%v", c.flags)
		require.True(t, needs(append([]string{"inspect", "unc", "-n", "pay ments"}, c.flags...)...), "%v", c.flags)
	}
	for _, c := range [][]string{{"inspect", "--help"}, {"idempotency", "inspect", "--help"}} {
		h := e.run(c...)
		requireCode(t, h, exitOK)
		require.Contains(t, h.stdout, `"needs_operator"`, "%v", c)
	}
}
