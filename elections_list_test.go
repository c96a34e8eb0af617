package sentinel_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

func TestElectionsListing(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	c := e.client(&sentinel.Config{Namespace: "ns1"})
	_, err := c.Elections(ctx, sentinel.ElectionFilter{Namespace: "x", AllNamespaces: true})
	require.ErrorIs(t, err, sentinel.ErrInvalid)
	_, err = c.Elections(ctx, sentinel.ElectionFilter{Limit: -1})
	require.ErrorIs(t, err, sentinel.ErrInvalid)

	es, err := c.Elections(ctx, sentinel.ElectionFilter{})
	require.NoError(t, err)
	require.Empty(t, es)

	lead, err := c.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, lead)
	waitFor(t, 10*time.Second, "a leader", lead.IsLeader)
	follower, err := e.client(&sentinel.Config{Namespace: "ns1"}).Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, follower)
	other, err := e.client(&sentinel.Config{Namespace: "ns2"}).Elector("billing", sentinel.ElectorOptions{})
	require.NoError(t, err)
	stopOther := runElector(t, other)
	waitFor(t, 10*time.Second, "a leader in ns2", other.IsLeader)
	waitFor(t, 10*time.Second, "two members", func() bool {
		ms, err := c.Members(ctx, "scheduler")
		return err == nil && len(ms) == 2
	})

	es, err = c.Elections(ctx, sentinel.ElectionFilter{})
	require.NoError(t, err)
	require.Len(t, es, 1)
	require.Equal(t, "ns1/scheduler", es[0].String())
	require.NotNil(t, es[0].Leader)
	require.Equal(t, c.Owner(), es[0].Leader.Owner)
	require.Equal(t, 2, es[0].Members)

	// A resigned group stays listed, without a leader.
	require.NoError(t, stopOther())
	es, err = c.Elections(ctx, sentinel.ElectionFilter{AllNamespaces: true})
	require.NoError(t, err)
	require.Len(t, es, 2)
	require.Equal(t, "ns2/billing", es[1].String())
	require.Nil(t, es[1].Leader, "the group's only elector resigned")
	require.Equal(t, 0, es[1].Members)

	es, err = c.Elections(ctx, sentinel.ElectionFilter{AllNamespaces: true, Limit: 1})
	require.NoError(t, err)
	require.Len(t, es, 1)
}
