package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// section returns the text of the start page's section headed heading.
func sectionOf(t *testing.T, body, heading string) string {
	t.Helper()
	i := strings.Index(body, `id="section-`+heading+`"`)
	require.Positive(t, i, body)
	s := body[i:]
	if j := strings.Index(s, "</section>"); j >= 0 {
		s = s[:j]
	}
	return s
}

// The start page's Reconciling section told the operator to
// "force-complete (it happened) or reset to claimed (it did not)" with an
// HTTP request's key among its rows, which the console resolves with a
// response and never force-completes (its page offers "Resolve with a
// response"); the Rerun pending tab said "the next caller with WithRerun
// runs it again" of an HTTP request's key, which the client's repeat of
// the request re-runs. Each now says so for such keys, and only when it
// lists one.
func TestSectionNotesSayWhatAnHTTPKeyNeeds(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	reconciling := func(key string) {
		uncertain(t, c, key)
		ex, err := c.Inspect(ctx, key)
		require.NoError(t, err)
		_, err = c.Reconcile(ctx, key, sentinel.WithToken(ex.Token))
		require.NoError(t, err)
	}
	rerun := func(key string) {
		_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 0, errors.New("timed out") }, sentinel.WithRerun(3))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	reconciling("order-1")
	rerun("order-2")
	s := server(t, c, console.Options{OperatorToken: opToken})
	const resolved, repeat = "resolved with the response its retries get", "the client&#39;s repeat of the request"

	_, body := get(t, s.URL+"/ops/")
	require.NotContains(t, sectionOf(t, body, "Reconciling"), resolved)
	code, body := get(t, s.URL+"/ops/?state=rerun-pending")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, sectionOf(t, body, "Rerun pending"), repeat)

	reconciling(idempotency.ExecutionKey("cus_1", "k-1"))
	rerun(idempotency.ExecutionKey("cus_1", "k-2"))
	_, body = get(t, s.URL+"/ops/")
	require.Contains(t, sectionOf(t, body, "Reconciling"), resolved)
	_, body = get(t, s.URL+"/ops/?state=rerun-pending")
	require.Contains(t, sectionOf(t, body, "Rerun pending"), repeat)
}
