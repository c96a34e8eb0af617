package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The run being reconciled returned success (its completion was refused):
// the confirmation of "reset to claimed", which runs fn again, says so.
// It said only "The work did not happen", whatever the history held.
func TestResetConfirmationWarnsOfSuccessEvidence(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	refusedOnce(t, c, "charge", "ch_1", nil)
	ex, err := c.Reconcile(ctx, "charge")
	require.NoError(t, err)

	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"reset"}, "ns": {"default"}, "key": {"charge"},
		"token": {strconv.FormatInt(ex.Token, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="reset-evidence"`, "the reset confirmation says nothing of fn's returned success")

	// Without such evidence, no warning.
	uncertain(t, c, "plain")
	ex, err = c.Reconcile(ctx, "plain")
	require.NoError(t, err)
	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"reset"}, "ns": {"default"}, "key": {"plain"},
		"token": {strconv.FormatInt(ex.Token, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="reset-evidence"`)
}
