package console_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An action whose database could not be reached failed with "Failed" and
// the driver's error alone: nothing said whether the key was changed, nor
// what to do. An operator who saw "Failed" on a force-complete does not
// know whether to type it again, or whether callers already get the
// value. The page now says the action may or may not have been done, to
// look at the key's page once the database answers, and that doing it
// again is safe (guarded by the token seen).
func TestActDatabaseUnreachableSaysWhatToDo(t *testing.T) {
	c, p, down := downableClient(t, "payments")
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	form := confirmForm(t, s.URL, "reconcile", "payments", "pay-1", ex.Token)

	down.Store(true)
	p.Reset() // the database is gone: no connection, none to be made
	code, body := post(t, s.URL, form)
	require.GreaterOrEqual(t, code, 500, body)
	require.Contains(t, body, "may or may not have been done", body)
	require.Contains(t, body, "open the key&#39;s page", body)
	require.Contains(t, body, "safe", body)
	require.Contains(t, body, `href="key?key=pay-1&amp;ns=payments"`, "back to the key")
	require.NotContains(t, body, `data-wait-db`, "a POST's result must not reload itself: that sends the action again")

	down.Store(false)
	now, err := c.Inspect(ctxT(t), "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
}
