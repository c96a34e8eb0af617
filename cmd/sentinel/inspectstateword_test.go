package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// list marks a key rerun pending longer than --rerun-pending-after
// "rerun pending, needs an operator"; inspect of the same key with the same threshold
// said in its state line "the next caller with WithRerun runs it again",
// as of one stopped a second ago (only its last paragraph said
// otherwise). The state line now says what list says, in the same words;
// idempotency inspect's, of a repeat of the request.
func TestInspectStateSaysNeedsAnOperator(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	httpKey := idempotency.ExecutionKey("cus 1's $HOME", "k-old")
	e.rerunPendingAged(e.newClient("pay ments"), httpKey, "rr-old")
	state := regexp.MustCompile(`(?m)^state: +(.*)$`)
	const (
		caller = "executing (rerun pending: attempt 1 of 3 stopped, the next caller with WithRerun runs attempt 2)"
		repeat = "executing (rerun pending: attempt 1 of 3 stopped, the client's repeat of the request runs attempt 2)"
	)
	for _, c := range []struct {
		args        []string
		want, fresh string
	}{
		{[]string{"inspect", "rr-old"}, "executing (rerun pending, needs an operator: attempt 1 of 3 stopped, no caller with WithRerun came back for more than 10m)", caller},
		{[]string{"inspect", httpKey}, "executing (rerun pending, needs an operator: attempt 1 of 3 stopped, no repeat of the request came back for more than 10m)", repeat},
		{[]string{"idempotency", "inspect", "k-old", "--scope", "cus 1's $HOME"}, "executing (rerun pending, needs an operator: attempt 1 of 3 stopped, no repeat of the request came back for more than 10m)", repeat},
	} {
		r := e.run(append(c.args, "-n", "pay ments", "--rerun-pending-after", "10m")...)
		requireCode(t, r, exitOK)
		m := state.FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		require.Equal(t, c.want, m[1], "%v", c.args)
		for _, d := range [][]string{nil, {"--rerun-pending-after", "1h"}} {
			r = e.run(append(append(c.args, "-n", "pay ments"), d...)...)
			requireCode(t, r, exitOK)
			require.NotContains(t, r.stdout, "needs an operator", "%v %v", c.args, d)
			require.Equal(t, c.fresh, state.FindStringSubmatch(r.stdout)[1], "%v %v", c.args, d)
		}
	}
}
