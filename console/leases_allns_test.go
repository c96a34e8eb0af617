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
