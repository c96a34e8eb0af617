package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// The operator's name: the form's limit (maxlength 200, in characters) is
// the server's, so a name in Cyrillic the form let through is recorded;
// and when Options.Operator names no one, the refusal says so instead of
// asking for a name no field of the form takes.
func TestOperatorNameRefusals(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k1")
	ex, err := c.Inspect(ctx, "k1")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	form := confirmForm(t, s.URL, "reconcile", "default", "k1", ex.Token)
	name := strings.Repeat("я", 150) // 150 characters, 300 bytes
	form.Set("operator", name)
	code, body := post(t, s.URL, form)
	require.Equal(t, http.StatusOK, code, "a 150-character name was refused: %s", body)
	hist, err := c.History(ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, name, hist[len(hist)-1].Metadata["operator_name"])
	rec, err := c.Inspect(ctx, "k1")
	require.NoError(t, err)
	form = confirmForm(t, s.URL, "reset", "default", "k1", rec.Token)
	form.Set("operator", strings.Repeat("я", 201))
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "up to 200 characters")

	uncertain(t, c, "k2")
	ex2, err := c.Inspect(ctx, "k2")
	require.NoError(t, err)
	app := server(t, c, console.Options{OperatorToken: opToken, Operator: func(r *http.Request) string { return r.Header.Get("X-User") }})
	code, body = post(t, app.URL, confirmForm(t, app.URL, "reconcile", "default", "k2", ex2.Token)) // no X-User
	require.Equal(t, http.StatusBadRequest, code, body)
	require.NotContains(t, body, "Give your name", "asked for a name the form has no field for")
	require.Contains(t, body, "its Operator function")
	now, err := c.Inspect(ctx, "k2")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
}
