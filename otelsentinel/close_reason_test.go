package otelsentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// Client.Close ends the execution lease of a Once whose fn is running (fn's
// ctx is cancelled): that is counted on sentinel.lease.losses with
// sentinel.reason "closed", not "lost", so an alert on lost leases does not
// fire at every deploy that closes a client mid-call (what Close did to the
// key is the call's outcome, on sentinel.once.calls). A lease Close finds
// taken over is a real loss, and still reads "lost". Before, both read
// "lost".
func TestCloseDuringOnceIsReasonClosed(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	a := w.client(&sentinel.Config{Observer: w.obs, DefaultTTL: time.Minute})
	b := w.client(nil)

	// A lease of a that an operator takes over: Close will not find it.
	_, err := a.Lease(ctx, "forced")
	require.NoError(t, err)
	op, err := b.Lease(ctx, "forced", sentinel.WithForce())
	require.NoError(t, err)

	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, a, "charge", func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, sentinel.Retryable(context.Cause(ctx)) // nothing happened: the key is free again
		})
		done <- err
	}()
	<-started
	a.Close()
	require.Error(t, <-done)
	require.NoError(t, op.Release(ctx))

	require.Eventually(t, func() bool {
		m := w.metrics()["sentinel.lease.losses"]
		return m != nil && len(sumBy(t, m, otelsentinel.AttrLeaseKind)) == 2
	}, 5*time.Second, 10*time.Millisecond)
	m := w.metrics()
	require.Equal(t, map[string]int64{"execution": 1, "lease": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrLeaseKind))
	require.Equal(t, map[string]int64{"closed": 1, "lost": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrReason))
	require.Equal(t, map[string]int64{"execution/closed": 1, "lease/lost": 1},
		sumBy2(t, m["sentinel.lease.losses"], otelsentinel.AttrLeaseKind, otelsentinel.AttrReason))
}

// sumBy2 returns a counter's values keyed by two attributes' values, "a/b".
func sumBy2(t *testing.T, agg metricdata.Aggregation, a, b attribute.Key) map[string]int64 {
	t.Helper()
	sum, ok := agg.(metricdata.Sum[int64])
	require.True(t, ok, "%T is not an int64 sum", agg)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		va, _ := dp.Attributes.Value(a)
		vb, _ := dp.Attributes.Value(b)
		out[va.String()+"/"+vb.String()] += dp.Value
	}
	return out
}
