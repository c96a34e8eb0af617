package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// Some refusals said what was refused and no more: "This console is
// read-only: no action is possible here.", "The request came from another
// site.", and a key gone between the form and the action answered with
// the library's "no such execution". Each now says that nothing was
// changed and what to do.
func TestRefusalsSayWhatToDo(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	rw := server(t, c, console.Options{OperatorToken: opToken})
	ro := server(t, c, console.Options{ReadOnly: true})

	code, body := get(t, ro.URL+"/ops/confirm?action=reconcile&ns=default&key=pay-1&token=1")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "the command line: sentinel inspect pay-1 -n default --schema "+c.Config().Schema+" prints the commands", "read-only: where to act instead")
	code, body = post(t, ro.URL, confirmForm(t, rw.URL, "reconcile", "default", "pay-1", ex.Token))
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "Nothing was changed")
	require.Contains(t, body, "the command line: sentinel inspect pay-1 -n default --schema "+c.Config().Schema+" prints the commands")

	code, body = post(t, rw.URL, confirmForm(t, rw.URL, "reconcile", "default", "pay-1", ex.Token), "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "Nothing was changed")
	require.Contains(t, body, "this console&#39;s own page", "another site: what to do")

	form := confirmForm(t, rw.URL, "reconcile", "default", "pay-1", ex.Token)
	_, err = admin.Exec(ctx, `DELETE FROM "`+c.Config().Schema+`".executions WHERE key = 'pay-1'`)
	require.NoError(t, err)
	code, body = post(t, rw.URL, form)
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "Nothing was changed")
	require.Contains(t, body, "no execution any more", "the key went: %s", body)
}
