package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// reconcilingKey leaves key of namespace ns reconciling: fn failed (the
// key uncertain), then an operator reconciled it.
func reconcilingKey(t *testing.T, c *sentinel.Client, ns, key string) {
	t.Helper()
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) { return 0, errors.New("boom") }, sentinel.WithNamespace(ns))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = c.Reconcile(ctx, key, sentinel.WithNamespace(ns))
	require.NoError(t, err)
}

// ageReconciling moves back by d when key (of schema) entered
// reconciling, as d spent reconciling would leave it.
func ageReconciling(t *testing.T, schema, key string, d time.Duration) {
	t.Helper()
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - $1 * interval '1 second' WHERE key = $2", d.Seconds(), key)
	require.NoError(t, err)
}

// sentinel status --exit-code pages on a key reconciling for longer than
// --reconciling-after (default 1h), and list and inspect mark it
// "reconciling (needs an operator: for more than 1h)"; the console
// showed it as any reconciling key, so the operator paged for it found
// nothing on the console saying so. The start page now lists such keys
// under a section of their own, the counts at the top of every page name
// their namespaces, and the key's page marks it in the command's words. A
// key reconciling for less than the threshold is not marked.
func TestReconcilingStaleNeedsOperator(t *testing.T) {
	c, schema := newClient(t)
	reconcilingKey(t, c, "pay", "order-old")
	reconcilingKey(t, c, "pay", "order-new")
	reconcilingKey(t, c, "mail", "notice-new")
	ageReconciling(t, schema, "order-old", 2*time.Hour)
	s := server(t, c, console.Options{ReadOnly: true})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	const heading = "Reconciling, needs an operator (for more than 1h)"
	stale := sectionOf(t, body, heading)
	require.Contains(t, stale, `data-key="order-old"`, "the start page lists the key reconciling for 2h as needing an operator")
	require.NotContains(t, stale, `data-key="order-new"`, "a key reconciling for less than 1h is not")
	require.Contains(t, stale, "reconciling (needs an operator: for more than 1h)")
	fresh := sectionOf(t, body, "Reconciling")
	require.Contains(t, fresh, `data-key="order-new"`)
	require.NotContains(t, fresh, `data-key="order-old"`, "listed once, under the section that says it needs an operator")
	require.NotContains(t, fresh, "needs an operator: for more than")

	code, body = get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `id="reconciling-stale-counts"><strong>Reconciling, needs an operator \(for more than 1h[^<]*</strong> <a [^>]*href="\./\?ns=pay&amp;state=attention"[^>]*>pay: 1</a></span>`, body)
	require.NotRegexp(t, `id="reconciling-stale-counts">.*mail: 1`, body, "mail's key is reconciling for less than 1h")

	keyPage := func(ns, key string) string {
		t.Helper()
		code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {ns}, "key": {key}}.Encode())
		require.Equal(t, http.StatusOK, code, body)
		return body
	}
	body = keyPage("pay", "order-old")
	require.Contains(t, body, ">reconciling (needs an operator: for more than 1h)</span>")
	require.Contains(t, body, "every caller gets ErrReconciling")
	body = keyPage("pay", "order-new")
	require.NotContains(t, body, "needs an operator: for more than")

	// The Reconciling tab lists both, the old one marked.
	code, body = get(t, s.URL+"/ops/?state=reconciling")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `data-key="order-new"`)
	require.Contains(t, body, `data-key="order-old"`)
	require.Contains(t, body, ">reconciling (needs an operator: for more than 1h)</span>")
}

// A key goes from reconciling to reconciling for more than
// Options.ReconcilingAfter with no event: the live view's count check
// now carries the count of such keys (reconciling_stale), read as the
// top of the pages reads it, so a page left open says when one crossed
// the threshold.
func TestLiveAttentionCountsReconcilingStale(t *testing.T) {
	c, schema := newClient(t)
	reconcilingKey(t, c, "pay", "order")
	s := server(t, c, console.Options{ReadOnly: true, PollInterval: 50 * time.Millisecond})
	n := 0
	attentionEvents(t, s.URL, func(counts map[string]map[string]float64) bool {
		n++
		if n == 1 {
			require.Contains(t, counts, "reconciling_stale", "the first counts say none is reconciling too long: %v", counts)
			require.Empty(t, counts["reconciling_stale"], "it was reconciled just now")
			ageReconciling(t, schema, "order", 2*time.Hour)
			return true
		}
		require.Equal(t, map[string]float64{"pay": 1}, counts["reconciling_stale"], "counts %v", counts)
		return false
	})
}

// Options.ReconcilingAfter moves the threshold, as sentinel status's
// --reconciling-after does. A negative one is refused.
func TestReconcilingAfterOption(t *testing.T) {
	c, schema := newClient(t)
	reconcilingKey(t, c, "pay", "order-old")
	ageReconciling(t, schema, "order-old", 2*time.Hour)
	_, err := console.New(c, console.Options{ReadOnly: true, ReconcilingAfter: -time.Minute})
	require.ErrorContains(t, err, "ReconcilingAfter must not be negative")
	require.Error(t, console.CheckOptions(console.Options{ReadOnly: true, ReconcilingAfter: -time.Minute}))
	s := server(t, c, console.Options{ReadOnly: true, ReconcilingAfter: 3 * time.Hour})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, sectionOf(t, body, "Reconciling, needs an operator (for more than 3h)"), `data-key="order-old"`, "2h is within 3h")
	require.Contains(t, sectionOf(t, body, "Reconciling"), `data-key="order-old"`)
	require.NotContains(t, body, `id="reconciling-stale-counts"`)
	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"pay"}, "key": {"order-old"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "needs an operator: for more than")

	// A filter by change time before the cut leaves the section of the
	// keys reconciling for less than 3h empty, and the page reads.
	code, body = get(t, s.URL+"/ops/?"+url.Values{"before": {time.Now().Add(-5 * time.Hour).UTC().Format(time.RFC3339)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `data-key="order-old"`)
	require.Contains(t, sectionOf(t, body, "Reconciling"), "None.")
}
