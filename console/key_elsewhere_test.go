package console_test

import (
	"context"
	"html"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A key's page reached without a namespace (or with one that does not
// have the key) links to the key in each namespace that has it, instead
// of saying "No such execution".
func TestKeyPageLinksToTheKeyInOtherNamespaces(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	for _, ns := range []string{"payments", "office"} {
		_, err := sentinel.Once(ctx, c, "order-7", func(context.Context) (int, error) { return 7, nil }, sentinel.WithNamespace(ns))
		require.NoError(t, err)
	}
	s := server(t, c, console.Options{ReadOnly: true})
	for _, q := range []string{"key=order-7", "key=order-7&ns=default"} {
		code, body := get(t, s.URL+"/ops/key?"+q)
		require.Equal(t, http.StatusNotFound, code, body)
		require.NotContains(t, body, "No such execution", q)
		require.Contains(t, html.UnescapeString(body), `Key "order-7" has no execution in namespace "default", but has one in 2 other namespace(s):`, q)
		require.Contains(t, body, `href="key?key=order-7&amp;ns=office"`, q)
		require.Contains(t, body, `href="key?key=order-7&amp;ns=payments"`, q)
	}
	// In more namespaces than the page links to: the first ones, and how
	// many more.
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.executions (namespace, key, state, owner, token, created_at, updated_at)
SELECT 'ns-' || pg_catalog.lpad(i::text, 2, '0'), 'order-9', 'completed', 'test', 0, pg_catalog.now(), pg_catalog.now()
FROM pg_catalog.generate_series(1, 23) AS i`)
	require.NoError(t, err)
	code, body := get(t, s.URL+"/ops/key?key=order-9")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, `href="key?key=order-9&amp;ns=ns-20"`)
	require.NotContains(t, body, `ns=ns-21`)
	require.Contains(t, body, `And 3 more namespace(s)`)

	// Nowhere: no such execution, as before.
	code, body = get(t, s.URL+"/ops/key?key=order-8")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, "No such execution")
}

// The confirmation page of an action on a key that is not in the
// namespace of its URL (a link edited or typed) said only "Could not read
// the key"; it links to the key where it is, as the key page does.
func TestConfirmPageLinksToTheKeyInOtherNamespaces(t *testing.T) {
	c, _ := newClient(t)
	_, err := sentinel.Once(ctxT(t), c, "pay-3", func(context.Context) (int, error) { return 3, nil }, sentinel.WithNamespace("payments"))
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, s.URL+"/ops/confirm?action=reconcile&key=pay-3&ns=default&token=1")
	require.Equal(t, http.StatusNotFound, code, body)
	require.NotContains(t, body, "Could not read the key")
	require.Contains(t, body, `href="key?key=pay-3&amp;ns=payments"`)
}
