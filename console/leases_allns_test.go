package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An operator who names no namespace sees the leases of every namespace,
// as on the start page; Options.Namespace (serve -n) narrows.
func TestLeasesPageEveryNamespace(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	for _, ns := range []string{"default", "payments"} {
		l, err := c.Lease(ctx, "lease-in-"+ns, sentinel.WithTTL(30*time.Second), sentinel.WithNamespace(ns))
		require.NoError(t, err)
		defer l.Release(context.Background())
	}
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "lease-in-default")
	require.Contains(t, body, "lease-in-payments", "a lease of another namespace is hidden from an operator who named none")

	code, body = get(t, s.URL+"/ops/leases?ns=payments")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "lease-in-payments")
	require.NotContains(t, body, "lease-in-default")

	narrow := server(t, c, console.Options{ReadOnly: true, Namespace: "payments"})
	code, body = get(t, narrow.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.Contains(body, "lease-in-payments") && !strings.Contains(body, "lease-in-default"), body)
}

// More live leases than the page shows: the page says so, instead of
// dropping the rest in silence.
func TestLeasesPageSaysWhenTruncated(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.leases (namespace, key, owner, token, acquired_at, renewed_at, expires_at, hard_expires_at)
SELECT 'default', 'bulk-' || pg_catalog.lpad(i::text, 4, '0'), 'w', i, now(), now(), now() + interval '1 hour', 'infinity'
FROM pg_catalog.generate_series(1, 501) AS i`)
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "bulk-0500")
	require.NotContains(t, body, "bulk-0501")
	require.Contains(t, body, `id="leases-more"`, "the page dropped the 501st lease without saying so")

	code, body = get(t, s.URL+"/ops/leases?prefix=bulk-050")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "bulk-0501")
	require.NotContains(t, body, `id="leases-more"`)
}

// The pages without a live view (leases, queues, elections) say when they
// were read: their expiries ("29s from now") go stale as the tab stays
// open, and nothing said so.
func TestViewsSayWhenTheyWereRead(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true})
	for _, p := range []string{"leases", "queues", "elections"} {
		code, body := get(t, s.URL+"/ops/"+p)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `id="read-at"`, "%s: no word of when it was read", p)
		require.NotContains(t, body, "data-live", p)
	}
}

// A message page (an action's result, the answer to a POST) does not ask
// to be reloaded.
func TestMessagePageDoesNotAskForAReload(t *testing.T) {
	c, _ := newClient(t)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/confirm?action=reconcile&ns=default&key=k&token=1")
	require.Equal(t, http.StatusForbidden, code, body)
	require.NotContains(t, body, `id="read-at"`)
}

// Narrowed to a namespace (Options.Namespace, serve -n), the Leases and
// Queues pages can still list every namespace, as the start page can
// (its "all namespaces" box): they could not.
func TestLeasesAndQueuesAllNamespacesWhenNarrowed(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	l, err := c.Lease(ctx, "lease-elsewhere", sentinel.WithTTL(30*time.Second), sentinel.WithNamespace("default"))
	require.NoError(t, err)
	defer l.Release(context.Background())
	tn, err := c.Turn(ctx, "printer-elsewhere", sentinel.WithNamespace("default"))
	require.NoError(t, err)
	defer tn.Release(context.Background())
	s := server(t, c, console.Options{ReadOnly: true, Namespace: "payments"})
	for _, p := range []string{"leases", "queues"} {
		code, body := get(t, s.URL+"/ops/"+p)
		require.Equal(t, http.StatusOK, code, body)
		require.NotContains(t, body, "-elsewhere", p)
		require.Contains(t, body, `name="all"`, "%s: no way to list every namespace", p)
		code, body = get(t, s.URL+"/ops/"+p+"?all=1")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "-elsewhere", p)
	}
}
