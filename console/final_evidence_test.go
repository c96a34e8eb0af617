package console_test

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// fn returned Final(err) (a declined card) after its lease was lost, so
// its completion was refused. The key's page offered "Force-complete with
// this result…" with fn's value, and the confirmation filled it in: one
// click stored the zero receipt, which every caller then got as a success
// instead of the decline. The page now says it was a Final outcome and
// offers no such link, and a hand-made confirmation URL fills in nothing.
func TestKeyPageDoesNotOfferAFinalOutcomeAsTheResult(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	refusedOnce(t, c, "charge", map[string]any{"id": "ch_zero"}, sentinel.Final(errors.New("card declined")))
	ex, err := c.Reconcile(ctx, "charge")
	require.NoError(t, err)
	hist, err := c.History(ctx, "charge")
	require.NoError(t, err)
	var refused int64
	for _, ev := range hist {
		if ev.Type == "completion_refused" {
			refused = ev.ID
		}
	}
	require.NotZero(t, refused, "a completion_refused event")

	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/key?ns=default&key=charge")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "card declined")
	require.Contains(t, body, `class="note final-outcome"`)
	require.NotContains(t, body, `id="use-refused-`, "fn's value offered as the key's result")

	code, body = get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"force_complete"}, "ns": {"default"}, "key": {"charge"},
		"token": {strconv.FormatInt(ex.Token, 10)}, "evidence": {strconv.FormatInt(refused, 10)}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "ch_zero", "the confirmation filled in fn's value")
	require.Contains(t, body, "Final outcome")
}
