package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A key reconciled from the console: "Taken from ... by reconcile" named
// the console's own process (its owner, $USER@host/sentinel-PID for
// sentinel serve), not the operator who acted, and said "the row names
// the operator", which the row, the console's process too, does not. A
// second operator read it as done by whoever runs the console. It now
// names the operator recorded in the history (operator_name), and the
// process it went through apart.
func TestTakenFromNamesTheOperator(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "charge")
	ex, err := c.Inspect(ctx, "charge")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := post(t, s.URL, confirmForm(t, s.URL, "reconcile", "default", "charge", ex.Token))
	require.Equal(t, http.StatusOK, code, body)
	after, err := c.Inspect(ctx, "charge")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, after.State)

	code, body = get(t, s.URL+"/ops/key?ns=default&key=charge")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `by reconcile [0-9:. Z-]+ \(<code>Ada</code>`, body, "the operator who reconciled")
	require.Contains(t, body, "through <code>"+after.Owner+"</code>", "the process it went through, apart")
	require.NotContains(t, body, "the row names the operator")
}
