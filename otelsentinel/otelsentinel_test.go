package otelsentinel_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/testmain"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

var (
	dbURL string
	admin *pgxpool.Pool
)

func TestMain(m *testing.M) {
	os.Exit(testmain.Run(m, &dbURL, &admin))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// world is one test's schema with an in-memory metric reader and span
// recorder behind an otelsentinel observer.
type world struct {
	t      *testing.T
	schema string
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	obs    *sentinel.Observer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, schema: "otel_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "_"),
		reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{w.schema}.Sanitize()+" CASCADE")
	})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(w.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(w.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(mp), otelsentinel.WithTracerProvider(tp))
	require.NoError(t, err)
	w.obs = obs
	require.NoError(t, w.client(nil).Migrate(ctxT(t)))
	return w
}

// client returns a client with the observer (unless cfg says otherwise).
func (w *world) client(cfg *sentinel.Config) *sentinel.Client {
	w.t.Helper()
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(w.t, err)
	w.t.Cleanup(p.Close)
	c := sentinel.Config{Observer: w.obs}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = w.schema
	cl, err := sentinel.New(p, &c)
	require.NoError(w.t, err)
	w.t.Cleanup(cl.Close)
	return cl
}

func (w *world) metrics() map[string]metricdata.Aggregation {
	w.t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(w.t, w.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(w.t, otelsentinel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sumBy returns a counter's values keyed by one attribute's value.
func sumBy(t *testing.T, agg metricdata.Aggregation, key attribute.Key) map[string]int64 {
	t.Helper()
	sum, ok := agg.(metricdata.Sum[int64])
	require.True(t, ok, "%T is not an int64 sum", agg)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		v, _ := dp.Attributes.Value(key)
		out[v.String()] += dp.Value
	}
	return out
}

func histCount[N int64 | float64](t *testing.T, agg metricdata.Aggregation) uint64 {
	t.Helper()
	h, ok := agg.(metricdata.Histogram[N])
	require.True(t, ok, "%T", agg)
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}

func spanAttr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestOnceOutcomesMetricsAndSpans(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(&sentinel.Config{Observer: w.obs, Namespace: "pay"})

	// ran, with fn's context a child of the Once span
	var fnSpan trace.SpanContext
	res, err := sentinel.Once(ctx, c, "a", func(ctx context.Context) (int, error) {
		fnSpan = trace.SpanContextFromContext(ctx)
		return 1, nil
	})
	require.NoError(t, err)
	require.True(t, fnSpan.IsValid())
	// cached
	_, err = sentinel.Once(ctx, c, "a", func(context.Context) (int, error) { return 0, nil })
	require.NoError(t, err)
	// uncertain (fn fails after crossing the boundary), then rejected as uncertain
	for range 2 {
		_, err = sentinel.Once(ctx, c, "u", func(context.Context) (int, error) { return 0, errors.New("boom") })
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	// retryable
	_, err = sentinel.Once(ctx, c, "r", func(context.Context) (int, error) { return 0, sentinel.Retryable(errors.New("busy")) })
	require.Error(t, err)
	// in progress
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctx, c, "p", func(context.Context) (int, error) {
			close(started)
			<-finish
			return 2, nil
		}, sentinel.WithTTL(5*time.Second))
		done <- err
	}()
	<-started
	_, err = sentinel.Once(ctx, c, "p", func(context.Context) (int, error) { return 0, nil })
	require.ErrorIs(t, err, sentinel.ErrInProgress)
	close(finish)
	require.NoError(t, <-done)
	// reconciling
	_, err = c.Reconcile(ctx, "u")
	require.NoError(t, err)
	_, err = sentinel.Once(ctx, c, "u", func(context.Context) (int, error) { return 0, nil })
	require.ErrorIs(t, err, sentinel.ErrReconciling)
	// final: fn's error is the outcome, stored and replayed
	for range 2 {
		_, err = sentinel.Once(ctx, c, "f", func(context.Context) (int, error) { return 0, sentinel.Final(errors.New("card declined")) })
		require.ErrorIs(t, err, sentinel.ErrFinal)
	}
	// a bad key: error
	_, err = sentinel.Once(ctx, c, "", func(context.Context) (int, error) { return 0, nil })
	require.ErrorIs(t, err, sentinel.ErrInvalid)

	m := w.metrics()
	require.Equal(t, map[string]int64{"ran": 2, "cached": 1, "uncertain": 2, "retryable": 1, "in_progress": 1,
		"reconciling": 1, "final": 2, "error": 1}, sumBy(t, m["sentinel.once.calls"], otelsentinel.AttrOutcome))
	require.Equal(t, map[string]int64{"pay": 11}, sumBy(t, m["sentinel.once.calls"], otelsentinel.AttrNamespace))
	require.EqualValues(t, 11, histCount[float64](t, m["sentinel.once.duration"]))

	var onceSpans []sdktrace.ReadOnlySpan
	for _, s := range w.spans.Ended() {
		if s.Name() == "sentinel.Once" {
			onceSpans = append(onceSpans, s)
		}
	}
	require.Len(t, onceSpans, 11)
	first := onceSpans[0]
	require.Equal(t, fnSpan.SpanID(), first.SpanContext().SpanID(), "fn's context carries the Once span")
	require.Equal(t, "a", spanAttr(first, otelsentinel.AttrKey).AsString())
	require.Equal(t, "pay", spanAttr(first, otelsentinel.AttrNamespace).AsString())
	require.Equal(t, "ran", spanAttr(first, otelsentinel.AttrOutcome).AsString())
	require.Equal(t, res.Token, spanAttr(first, otelsentinel.AttrToken).AsInt64())
	require.Equal(t, codes.Unset, first.Status().Code)
	unc := onceSpans[2]
	require.Equal(t, "uncertain", spanAttr(unc, otelsentinel.AttrOutcome).AsString())
	require.Equal(t, codes.Error, unc.Status().Code)
	require.Positive(t, spanAttr(onceSpans[3], otelsentinel.AttrToken).AsInt64(), "a rejection names the holder's token")
}

func TestLeaseMetricsAndSpans(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	a := w.client(nil)
	b := w.client(nil)

	l, err := a.Lease(ctx, "job", sentinel.WithTTL(time.Second))
	require.NoError(t, err)
	_, err = b.Lease(ctx, "job")
	require.ErrorIs(t, err, sentinel.ErrNotAcquired)

	// A waiter acquires once the holder releases.
	got := make(chan *sentinel.Lease, 1)
	go func() {
		l2, err := b.Lease(ctx, "job", sentinel.WithWait(), sentinel.WithTTL(time.Second))
		if err != nil {
			t.Error(err)
		}
		got <- l2
	}()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, l.Release(ctx))
	l2 := <-got
	require.NotNil(t, l2)

	// Stale token refused by a fencing check.
	err = a.VerifyToken(ctx, admin, "job", l.Token())
	require.ErrorIs(t, err, sentinel.ErrStaleToken)

	// A forced takeover: b learns of the loss at its next renewal.
	_, err = a.Lease(ctx, "job", sentinel.WithForce(), sentinel.WithTTL(5*time.Second))
	require.NoError(t, err)
	select {
	case <-l2.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was not noticed")
	}
	require.ErrorIs(t, l2.Err(), sentinel.ErrLeaseLost)
	// The observer hears of the loss just after Done closes.
	require.Eventually(t, func() bool { return w.metrics()["sentinel.lease.losses"] != nil }, 5*time.Second, 10*time.Millisecond)

	m := w.metrics()
	require.Equal(t, map[string]int64{"acquired": 3, "held": 1}, sumBy(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrResult))
	require.Equal(t, map[string]int64{"true": 1, "false": 3}, sumBy(t, m["sentinel.lease.acquisitions"], otelsentinel.AttrWait))
	require.EqualValues(t, 1, histCount[float64](t, m["sentinel.lease.wait.duration"]))
	require.Equal(t, map[string]int64{"lease": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrLeaseKind))
	require.Equal(t, map[string]int64{"lost": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrReason))
	require.Equal(t, map[string]int64{"default": 1}, sumBy(t, m["sentinel.fencing.refusals"], otelsentinel.AttrNamespace))
	require.Positive(t, histCount[float64](t, m["sentinel.heartbeat.duration"]))
	require.Positive(t, histCount[int64](t, m["sentinel.heartbeat.batch_size"]))

	var leaseSpans int
	for _, s := range w.spans.Ended() {
		if s.Name() == "sentinel.Lease" {
			leaseSpans++
			require.Equal(t, "job", spanAttr(s, otelsentinel.AttrKey).AsString())
		}
	}
	require.Equal(t, 4, leaseSpans)
}

// Queue and election events reach their instruments (the queue and the
// elector call these hooks).
func TestQueueAndElectionInstruments(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	obs, err := otelsentinel.NewObserver(otelsentinel.WithMeterProvider(mp))
	require.NoError(t, err)
	obs.QueueGranted(sentinel.QueueGrant{Namespace: "default", Resource: "printer", Ticket: 5, Wait: 20 * time.Millisecond, Ahead: 3})
	obs.QueueGranted(sentinel.QueueGrant{Namespace: "default", Resource: "printer", Ticket: 6, Wait: 10 * time.Millisecond, Ahead: -1})
	obs.TermChanged(sentinel.TermChange{Namespace: "default", Group: "scheduler", Term: 9, Self: true})
	obs.TermChanged(sentinel.TermChange{Namespace: "default", Group: "scheduler", Term: 9, Self: true, Demoted: true, Err: sentinel.ErrLeaseLost})
	obs.TermChanged(sentinel.TermChange{Namespace: "default", Group: "scheduler", Term: 10, Self: true})
	obs.TermChanged(sentinel.TermChange{Namespace: "default", Group: "scheduler", Term: 10, Self: true, Demoted: true})
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	got := map[string]metricdata.Aggregation{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		got[m.Name] = m.Data
	}
	require.EqualValues(t, 2, histCount[float64](t, got["sentinel.queue.wait.duration"]))
	require.EqualValues(t, 1, histCount[int64](t, got["sentinel.queue.depth"]), "an unknown depth is not recorded")
	depth := got["sentinel.queue.depth"].(metricdata.Histogram[int64])
	require.Equal(t, int64(3), depth.DataPoints[0].Sum)
	require.Equal(t, map[string]int64{"elected": 2, "demoted": 1, "resigned": 1}, sumBy(t, got["sentinel.election.term_changes"], otelsentinel.AttrRole))
}

// A Once whose execution lease reaches its hard TTL while fn runs: an
// execution-lease loss for the hard TTL, and an uncertain outcome.
func TestExecutionLeaseLoss(t *testing.T) {
	w := newWorld(t)
	c := w.client(nil)
	_, err := sentinel.Once(ctxT(t), c, "slow", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond)
		return 1, nil
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	m := w.metrics()
	require.Equal(t, map[string]int64{"execution": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrLeaseKind))
	require.Equal(t, map[string]int64{"hard_ttl": 1}, sumBy(t, m["sentinel.lease.losses"], otelsentinel.AttrReason))
	require.Equal(t, map[string]int64{"uncertain": 1}, sumBy(t, m["sentinel.once.calls"], otelsentinel.AttrOutcome))
}

// Closing a client whose elector leads gives the term back and removes the
// member row, as a Run whose ctx ended does: the SRE's alert on
// sentinel.lease.losses must not fire at every rolling deploy. Before, the
// leader and member leases that Close ended counted as two losses.
func TestCloseWhileLeadingIsNoLoss(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(nil)
	el, err := c.Elector("scheduler", sentinel.ElectorOptions{TTL: time.Second})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 10*time.Millisecond)
	c.Close()
	require.ErrorIs(t, <-done, sentinel.ErrClosed)

	var live int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{w.schema, "leaders"}.Sanitize()+
		" WHERE expires_at > now()").Scan(&live))
	require.Zero(t, live, "the term was given back")
	m := w.metrics()
	require.Equal(t, map[string]int64{"elected": 1, "resigned": 1}, sumBy(t, m["sentinel.election.term_changes"], otelsentinel.AttrRole))
	require.Nil(t, m["sentinel.lease.losses"], "a clean Close loses nothing")
}

// A lost term and a lost queue ticket are counted under their own
// sentinel.lease.kind. Before, both counted as kind "lease", keyed by the
// group or resource: the SRE paged on a lost lease looked for a lease
// named "scheduler" or "printer" that never existed.
func TestLeaseLossKinds(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(nil)
	table := func(name string) string { return pgx.Identifier{w.schema, name}.Sanitize() }

	el, err := c.Elector("scheduler", sentinel.ElectorOptions{TTL: time.Second})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- el.Run(rctx) }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 10*time.Millisecond)
	// Another term takes the row: the leader's next renewal loses it.
	_, err = admin.Exec(ctx, "UPDATE "+table("leaders")+" SET term = term + 1000, owner = 'intruder'")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !el.IsLeader() }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	tn, err := c.Turn(ctx, "printer", sentinel.WithTTL(time.Second))
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "DELETE FROM "+table("tickets"))
	require.NoError(t, err)
	select {
	case <-tn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the ticket's loss was not noticed")
	}

	require.Eventually(t, func() bool {
		m := w.metrics()["sentinel.lease.losses"]
		return m != nil && sumBy(t, m, otelsentinel.AttrLeaseKind)["ticket"] == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, map[string]int64{"leader": 1, "ticket": 1},
		sumBy(t, w.metrics()["sentinel.lease.losses"], otelsentinel.AttrLeaseKind))
}
