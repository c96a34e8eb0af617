package faults

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// endsAfterClaim is a context whose Err reports it ended once the claim
// statement has returned (its Done never closes, so no statement is cut
// short): the moment the library gives a claim back.
type endsAfterClaim struct {
	context.Context
	ended *atomic.Bool
}

func (c endsAfterClaim) Err() error {
	if c.ended.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

type claimTracer struct{ ended *atomic.Bool }

func (claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "once_claim_packed(") { // the claim statement
		return context.WithValue(ctx, claimTracer{}, true)
	}
	return ctx
}

func (t claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if ctx.Value(claimTracer{}) != nil {
		t.ended.Store(true)
	}
}

// A claim the library gives back because its caller's ctx ended before fn
// ran (state claimed, lease expired, a "released" event) is a legal end
// state: the Once audit must accept it, not report it as stuck (it did,
// and TestDatabaseRestart failed on such a key at the end of its load),
// and a later call runs fn exactly once.
func TestAuditAcceptsAClaimGivenBack(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	var ended atomic.Bool
	pool := newPool(t, cl.URL(), func(c *pgxpool.Config) { c.ConnConfig.Tracer = claimTracer{ended: &ended} })
	client := newClient(t, pool, sentinel.Config{DefaultTTL: time.Second, Owner: "gb"})

	ran := false
	_, err := sentinel.Once(endsAfterClaim{Context: ctx, ended: &ended}, client, "gb000", func(context.Context) (effect, error) {
		ran = true
		return effect{}, nil
	})
	require.ErrorContains(t, err, "given back")
	require.False(t, ran)
	ex, err := client.Inspect(ctx, "gb000")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateClaimed, ex.State, "the claim was given back")

	var v violations
	a := auditOnce(t, ctx, admin, client, []string{"gb000"}, nil, true, &v)
	require.Zero(t, v.count(), "violations: %v", v.list)
	require.Equal(t, []string{"gb000"}, a.GivenBack)
	auditFinal(t, ctx, admin, []string{"gb000"}, &v)
	require.Zero(t, v.count(), "violations: %v", v.list)
}
