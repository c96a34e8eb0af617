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
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// An HTTP request's key rerun pending a moment ago is re-run by the
// client's repeat of the request, as sentinel list, inspect and
// idempotency inspect say ("the client's repeat of the request runs
// attempt 2"); its key page said "the next call with WithRerun runs
// attempt 2 of 3", the words for a Once key, so the same key read two
// ways. It now says what the command line says.
func TestRerunPendingHTTPKeyYoungSaysTheRepeatRunsIt(t *testing.T) {
	c, _ := newClient(t)
	key := idempotency.ExecutionKey("cus_1", "k-young")
	_, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (int, error) {
		return 0, errors.New("card network timed out")
	}, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	s := server(t, c, console.Options{OperatorToken: opToken})

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {key}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "rerun pending: attempt 1 of 3 stopped")
	require.Contains(t, body, "the client&#39;s repeat of the request runs attempt 2 of 3", body)
	require.NotContains(t, body, "WithRerun runs attempt")
}
