package console_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// Force-complete refuses a value no caller would get back as typed: text
// that is not UTF-8 (callers got U+FFFD for it), a number beyond float64
// (1e999: every caller's decode failed; 1e-999: callers got 0). Nothing
// is written; the key stays reconciling.
func TestForceCompleteRefusesValuesJSONDoesNotCarry(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	rec, err := c.Reconcile(ctx, "pay-1", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	for _, v := range []string{"\"\xff\"", `{"amount": 1e999}`, `[1E-999]`, `-1e400`} {
		fc := confirmForm(t, s.URL, "force_complete", "default", "pay-1", rec.Token)
		fc.Set("value", v)
		code, body := post(t, s.URL, fc)
		require.Equal(t, http.StatusBadRequest, code, "value %q: %s", v, body)
		require.Contains(t, body, "Nothing was changed", v)
		now, err := c.Inspect(ctx, "pay-1")
		require.NoError(t, err)
		require.Equal(t, sentinel.StateReconciling, now.State, "value %q was stored", v)
	}
	// Zero and small numbers are carried.
	fc := confirmForm(t, s.URL, "force_complete", "default", "pay-1", rec.Token)
	fc.Set("value", `{"a": 0, "b": -0.0e5, "c": 5e-324, "d": 1e308}`)
	code, body := post(t, s.URL, fc)
	require.Equal(t, http.StatusOK, code, body)
}
