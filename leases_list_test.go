package sentinel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestLeasesListing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{Namespace: "ns1"})
	_, err := c.Leases(ctx, sentinel.LeaseFilter{Namespace: "x", AllNamespaces: true})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Leases(ctx, sentinel.LeaseFilter{Limit: -1})
	require.ErrorIs(t, err, sentinel.ErrInvalid)

	for _, k := range []string{"b", "a", "c"} {
		_, err := c.Lease(ctx, k)
		require.NoError(t, err)
	}
	other, err := c.Lease(ctx, "a", sentinel.WithNamespace("ns2"))
	require.NoError(t, err)
	require.NoError(t, other.Release(ctx))

	hs, err := c.Leases(ctx, sentinel.LeaseFilter{})
	require.NoError(t, err)
	require.Len(t, hs, 3)
	require.Equal(t, []string{"a", "b", "c"}, []string{hs[0].Key, hs[1].Key, hs[2].Key})
	require.Equal(t, c.Owner(), hs[0].Owner)
	hs, err = c.Leases(ctx, sentinel.LeaseFilter{AllNamespaces: true, Prefix: "a"})
	require.NoError(t, err)
	require.Len(t, hs, 1, "the released lease is not live")
	hs, err = c.Leases(ctx, sentinel.LeaseFilter{AllNamespaces: true, Prefix: "a", IncludeExpired: true})
	require.NoError(t, err)
	require.Len(t, hs, 2)
	require.Equal(t, "ns2", hs[1].Namespace)
	hs, err = c.Leases(ctx, sentinel.LeaseFilter{Limit: 2})
	require.NoError(t, err)
	require.Len(t, hs, 2)
}

// A prefix PostgreSQL cannot compare with text (invalid UTF-8, such as
// the console's ?prefix=%FF) is bad input, refused before the read: it
// reached the server and came back as its raw error (SQLSTATE 22021),
// which the console answered with 500.
func TestLeasesPrefixOfInvalidUTF8IsRefused(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(nil)
	for _, p := range []string{"\xff", "inv\xc3", "a\x00"} {
		_, err := c.Leases(ctx, sentinel.LeaseFilter{Prefix: p})
		require.ErrorIs(t, err, sentinel.ErrInvalid, "%q", p)
		var ie *sentinel.InvalidError
		require.ErrorAs(t, err, &ie)
		require.Equal(t, "Prefix", ie.Field)
	}
}
