package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// A console given both a shared OperatorToken and Operators' own tokens
// (sentinel serve with $SENTINEL_OPERATOR_TOKEN and --operators-file)
// asked every operator a name, required, "recorded in the key's history
// as self-declared: the shared token does not say who you are": an
// operator acting with a token of their own had to type a name that is
// never recorded (their token names them). The field is now optional
// there and says so; a shared token given without a name is still
// refused, the form shown again.
func TestNameFieldWithSharedAndOwnTokens(t *testing.T) {
	const adaTok = "0b1e6f3c9d2a4857e6f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7"
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken, Operators: map[string]string{"ada": adaTok}})
	code, body := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"reconcile"}, "ns": {"default"}, "key": {"k"}, "token": {itoa(int(ex.Token))}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `name="operator"`, "the shared token's users type their name")
	require.NotContains(t, body, `name="operator" id="operator" required`, body)
	require.Contains(t, body, "a token of your own names you", body)

	// The shared token without a name: refused, nothing written.
	form := confirmForm(t, s.URL, "reconcile", "default", "k", ex.Token)
	form.Del("operator")
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "Your name is needed")
	// Ada's own token without a name: done, recorded as ada's.
	form.Set("operator_token", adaTok)
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusOK, code, body)
	hist, err := c.History(ctx, "k")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reconciling", last.Type)
	require.Equal(t, "ada", last.Metadata["operator_name"])
	require.Equal(t, "token", last.Metadata["operator_auth"])
}
