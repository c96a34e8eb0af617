package otelsentinel_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// holdRenewal blocks the first renewal statement until its ctx ends.
type holdRenewal struct {
	once     sync.Once
	inflight chan struct{}
}

func (h *holdRenewal) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "THEN 'renewed'") {
		h.once.Do(func() {
			close(h.inflight)
			<-ctx.Done()
		})
	}
	return ctx
}

func (h *holdRenewal) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Client.Close aborts a renewal statement in flight: that is the client
// shutting down, not a failed heartbeat. Before, it was recorded on
// sentinel.heartbeat.duration with error.type "canceled" (and logged as
// "heartbeat failed"), so an alert on failed heartbeats could fire at a
// deploy.
func TestCloseDuringRenewalIsNoHeartbeatError(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	hr := &holdRenewal{inflight: make(chan struct{})}
	pc, err := pgxpool.ParseConfig(dbURL)
	require.NoError(t, err)
	pc.ConnConfig.Tracer = hr
	p, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	c, err := sentinel.New(p, &sentinel.Config{Schema: w.schema, Observer: w.obs})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	_, err = c.Lease(ctx, "job", sentinel.WithTTL(time.Second))
	require.NoError(t, err)
	select {
	case <-hr.inflight:
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal")
	}
	c.Close()

	if agg, ok := w.metrics()["sentinel.heartbeat.duration"]; ok {
		for _, dp := range agg.(metricdata.Histogram[float64]).DataPoints {
			v, has := dp.Attributes.Value(otelsentinel.AttrErrorType)
			require.False(t, has, "a renewal aborted by Close recorded error.type %q", v.AsString())
		}
	}
}
