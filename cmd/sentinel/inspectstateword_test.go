package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/idempotency"
)

// list marks a key rerun pending longer than --rerun-pending-after
// "NEEDS AN OPERATOR"; inspect of the same key with the same threshold
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
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "rr-old"}, "executing (stopped at attempt 1 of 3, rerun pending: NEEDS AN OPERATOR, no caller with WithRerun came back for more than 10m)"},
		{[]string{"inspect", httpKey}, "executing (stopped at attempt 1 of 3, rerun pending: NEEDS AN OPERATOR, no repeat of the request came back for more than 10m)"},
		{[]string{"idempotency", "inspect", "k-old", "--scope", "cus 1's $HOME"}, "executing (stopped at attempt 1 of 3, rerun pending: NEEDS AN OPERATOR, no repeat of the request came back for more than 10m)"},
	} {
		r := e.run(append(c.args, "-n", "pay ments", "--rerun-pending-after", "10m")...)
		requireCode(t, r, exitOK)
		m := state.FindStringSubmatch(r.stdout)
		require.NotNil(t, m, r.stdout)
		require.Equal(t, c.want, m[1], "%v", c.args)
		for _, d := range [][]string{nil, {"--rerun-pending-after", "1h"}} {
			r = e.run(append(append(c.args, "-n", "pay ments"), d...)...)
			requireCode(t, r, exitOK)
			require.NotContains(t, r.stdout, "NEEDS AN OPERATOR", "%v %v", c.args, d)
			require.Contains(t, r.stdout, "stopped at attempt 1 of 3: the next caller with WithRerun runs it again", "%v %v", c.args, d)
		}
	}
}
