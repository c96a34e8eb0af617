package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// urlAttrRE finds the URLs a page holds (links, form targets, sources).
var urlAttrRE = regexp.MustCompile(`(?:href|action|src)="([^"]*)"`)

// A refused form (a wrong operator token, a value that is not JSON) kept
// what was typed by putting it in the "← Back" link's query string: the
// force-complete value (customer data), the reason and the name went into
// the browser's history and the access logs of the console and of every
// proxy once the operator followed it, and a name field holding the
// operator token (pasted into the wrong field) put the token in that link.
// The confirmation page also filled its fields from any link's query, so
// a link made elsewhere could hand the operator a form with a value of
// its choosing. Now the refusal answers the POST with the form itself,
// what was typed kept in its fields and in no URL, the operator token
// never; a link's query fills nothing; and a name or reason that holds
// an operator token is neither shown again nor recorded.
func TestRefusedFormKeepsTypedOutOfURLs(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "pay-1")
	ex, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	rec, err := c.Reconcile(ctx, "pay-1", sentinel.WithToken(ex.Token))
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	const (
		value  = `{"customer": "cust_Zq81 jane@example.com", "amount": 4242}`
		reason = "PSP shows the charge for jane@example.com"
		name   = "Ada Lovelace"
	)
	noURLHolds := func(body string, secrets ...string) {
		t.Helper()
		for _, m := range urlAttrRE.FindAllStringSubmatch(body, -1) {
			u := html.UnescapeString(m[1])
			for _, s := range append([]string{"jane", "cust_Zq81", "Lovelace", "value=", "reason=", "operator="}, secrets...) {
				require.NotContains(t, u, s, "a URL of the page carries what was typed: %q", u)
			}
		}
		require.NotContains(t, body, opToken, "the operator token is shown in the page")
	}
	fc := confirmForm(t, s.URL, "force_complete", "default", "pay-1", rec.Token)
	fc.Set("value", value)
	fc.Set("reason", reason)
	fc.Set("operator", name)

	// A wrong operator token: the form again, as typed, in the answer.
	wrong := cloneForm(fc)
	wrong.Set("operator_token", "wrong-token-typed-at-3am")
	code, body := post(t, s.URL, wrong)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "Nothing was changed")
	noURLHolds(body, "wrong-token")
	require.NotContains(t, body, "wrong-token-typed-at-3am", "the token typed is shown in the page")
	require.Contains(t, body, ">"+html.EscapeString(value)+"</textarea>", "the value as typed, in the form")
	require.Contains(t, body, `value="`+html.EscapeString(reason)+`"`, "the reason as typed, in the form")
	require.Contains(t, body, `value="`+name+`"`, "the name as typed, in the form")
	require.Regexp(t, `name="operator_token" id="operator_token" required autocomplete="off">`, body, "the token field, empty")

	// Not JSON: the form again, the value as typed.
	bad := cloneForm(fc)
	bad.Set("value", `{"customer": "cust_Zq81 jane@example.com",}`)
	code, body = post(t, s.URL, bad)
	require.Equal(t, http.StatusBadRequest, code, body)
	noURLHolds(body)
	require.Contains(t, body, html.EscapeString(`{"customer": "cust_Zq81 jane@example.com",}`))

	// The operator token pasted into the name field, the token field
	// empty: the token is not shown, in a link or a field.
	pasted := cloneForm(fc)
	pasted.Set("operator", opToken)
	pasted.Set("operator_token", "")
	code, body = post(t, s.URL, pasted)
	require.Equal(t, http.StatusForbidden, code, body)
	noURLHolds(body)

	// The token given, and pasted into the reason too: refused, not
	// recorded (the history is read by everyone who reads the key).
	inReason := cloneForm(fc)
	inReason.Set("reason", "token was "+opToken)
	code, body = post(t, s.URL, inReason)
	require.Equal(t, http.StatusBadRequest, code, body)
	require.Contains(t, body, "Nothing was changed")
	noURLHolds(body)
	now, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, now.State)

	// A link's query fills no field of the form.
	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {"pay-1"},
		"token": {strconv.FormatInt(rec.Token, 10)}, "value": {`{"to": "attacker"}`}, "reason": {"planted"}, "operator": {"Mallory"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "attacker")
	require.NotContains(t, body, "planted")
	require.NotContains(t, body, "Mallory")

	// As typed, with the token: done.
	code, body = post(t, s.URL, fc)
	require.Equal(t, http.StatusOK, code, body)
	done, err := c.Inspect(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateCompleted, done.State)
	require.JSONEq(t, value, string(done.Result))
}

func cloneForm(f url.Values) url.Values {
	g := url.Values{}
	for k, v := range f {
		g[k] = append([]string(nil), v...)
	}
	return g
}
