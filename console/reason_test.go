package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The reason the form accepts (up to 2000 characters, its maxlength) is
// recorded whole: a reason in Cyrillic was cut at 2000 bytes, half of it
// lost, the cut possibly inside a character. A longer one is refused,
// nothing changed, instead of cut in silence.
func TestReasonRecordedWhole(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "k-reason")
	ex, err := c.Inspect(ctxT(t), "k-reason")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	form := confirmForm(t, s.URL, "reconcile", "default", "k-reason", ex.Token)
	form.Set("reason", strings.Repeat("я", 2001))
	code, body := post(t, s.URL, form)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "Nothing was changed")
	now, err := c.Inspect(ctxT(t), "k-reason")
	require.NoError(t, err)
	require.Equal(t, ex.Token, now.Token)

	reason := "провайдер подтвердил списание; " + strings.Repeat("я", 1900)
	form.Set("reason", reason)
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusOK, code, body)
	hist, err := c.History(ctxT(t), "k-reason")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reconciling", last.Type)
	require.Equal(t, reason, last.Metadata["reason"], "the operator's reason was cut")
}
