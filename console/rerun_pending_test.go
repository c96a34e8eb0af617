package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A key whose executor stopped with re-runs left (WithRerun) needs no
// operator: the next caller with WithRerun runs it again. The page showed
// it as a plain "executing" key whose lease had expired, with no action
// and no word of the re-run, and no page showed a key's attempt (the CLI
// says "executing (rerun 2/3 pending)" and "attempt: 1 of at most 3").
// Now the badge says "rerun pending: attempt 1 of 3 stopped" (the CLI's
// words since), the key page says no operator
// is needed and shows the attempt; a key whose attempts are used up is
// uncertain, with its attempt shown. The key page shows the effect key fn
// got (sentinel.EffectKey), to look the effect up at the provider.
func TestRerunPendingShownAsSuch(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	var effect string
	fails := func(ctx context.Context) (int, error) {
		effect = sentinel.EffectKey(ctx)
		return 0, errors.New("provider timed out")
	}
	_, err := sentinel.Once(ctx, c, "pay-pending", fails, sentinel.WithRerun(3))
	pendingEffect := effect
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "pay-spent", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctx, c, "pay-spent", fails, sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	s := server(t, c, console.Options{OperatorToken: opToken})

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {"pay-pending"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "rerun pending: attempt 1 of 3 stopped")
	require.Contains(t, body, "no operator is needed unless no caller with WithRerun comes back for more than 15m")
	require.Regexp(t, `id="key-attempt">1 of at most 3`, body)
	require.Contains(t, body, `id="key-effect">`+pendingEffect+`<`, "the effect key fn passed the provider")
	require.NotContains(t, body, "the outcome is unknown")

	code, body = get(t, s.URL+"/ops/?state=executing")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "rerun pending: attempt 1 of 3 stopped")

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {"pay-spent"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "the outcome is unknown")
	require.Regexp(t, `id="key-attempt">2 of at most 2`, body)
	require.NotContains(t, body, "pending")
}
