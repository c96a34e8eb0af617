// Package otelsentinel records Sentinel's metrics and traces with
// OpenTelemetry. It implements the core's observer hook
// (sentinel.Observer), so the core itself never imports OpenTelemetry:
//
//	obs, err := otelsentinel.NewObserver() // global MeterProvider and TracerProvider
//	client, err := sentinel.New(pool, &sentinel.Config{Observer: obs})
//
// Instruments, all named after the package ("sentinel."):
//
//	sentinel.once.calls             counter    Once/OnceTx calls (OnceRetry: one per
//	                                           attempt, each its own span), by sentinel.outcome
//	                                           (ran, cached, final, in_progress, uncertain,
//	                                           reconciling, retryable, error, rerun_pending,
//	                                           commit_unknown: an OnceTx commit not confirmed,
//	                                           settled without an operator,
//	                                           result_lost: fn succeeded but its value was
//	                                           not stored, replays too; needs SetResult;
//	                                           canceled: the caller's ctx ended before fn
//	                                           ran, or while OnceTx's fn ran (its transaction
//	                                           rolled back), nothing failed; closed: the client was
//	                                           closed before fn ran: see sentinel.OnceOutcome)
//	                                           and sentinel.namespace
//	sentinel.once.duration          histogram  seconds per call, same attributes
//	sentinel.lease.acquisitions     counter    Client.Lease and Client.AdoptHandle calls,
//	                                           by sentinel.result (acquired; adopted:
//	                                           AdoptHandle took a lease handed on over;
//	                                           stale: AdoptHandle's handle was no longer
//	                                           the current grant; hard_ttl: AdoptHandle
//	                                           refused, and gave back, a lease whose hard
//	                                           expiry was within the margin of the TTL
//	                                           asked (ErrHardTTL; no loss); held: held elsewhere, for a
//	                                           WithWait call until its ctx ended;
//	                                           canceled: the caller's ctx ended first,
//	                                           no failure; closed: Client.Close ended
//	                                           the wait, or the call came after it;
//	                                           error: bad input, database errors),
//	                                           sentinel.wait and
//	                                           sentinel.namespace
//	sentinel.lease.wait.duration    histogram  seconds a WithWait acquisition waited,
//	                                           by sentinel.namespace
//	sentinel.lease.losses           counter    leases lost, by sentinel.lease.kind (lease,
//	                                           execution, leader: an elector's term, member:
//	                                           an elector's member row, ticket: a queue
//	                                           ticket), sentinel.reason (lost: renewal
//	                                           deadline passed or taken over; hard_ttl;
//	                                           closed: Client.Close ended it, a running
//	                                           Once's execution lease, whose fn's ctx was
//	                                           cancelled: what that did to the key is the
//	                                           call's outcome in once.calls) and
//	                                           sentinel.namespace; a failed release is
//	                                           not a loss (see release_failures)
//	sentinel.lease.release_failures counter    release statements that failed (database
//	                                           unreachable, cancelled) for a lease or turn
//	                                           its holder was done with: Lease.Release,
//	                                           Turn.Release, Client.Close, an elector's
//	                                           step-down, a grant given back as its caller
//	                                           gave up (see sentinel.Observer.ReleaseFailed).
//	                                           No loss: the row
//	                                           expires within its TTL. By sentinel.lease.kind
//	                                           and sentinel.namespace
//	sentinel.heartbeat.duration     histogram  seconds per renewal statement, by error.type
//	                                           on failures (timeout, database); one
//	                                           aborted by Client.Close is not recorded
//	sentinel.heartbeat.batch_size   histogram  rows sent for renewal per statement that
//	                                           succeeded (some may have come back busy
//	                                           or lost: those are in lease.losses)
//	sentinel.queue.wait.duration    histogram  seconds from drawing a ticket to its grant,
//	                                           by sentinel.namespace
//	sentinel.queue.depth            histogram  live tickets ahead of a ticket when drawn,
//	                                           by sentinel.namespace
//	sentinel.election.term_changes  counter    terms seen, by sentinel.group, sentinel.role
//	                                           (elected; demoted: the term was lost, as in
//	                                           lease.losses kind leader, or a callback
//	                                           panicked; resigned: this node stepped down,
//	                                           by Resign, Run's ctx or Client.Close;
//	                                           follower: another node leads) and
//	                                           sentinel.namespace (a series per group:
//	                                           keep group names a fixed, small set)
//	sentinel.fencing.refusals       counter    stale tokens, terms and tickets refused by
//	                                           VerifyToken, VerifyExecutionToken, VerifyTerm
//	                                           and VerifyTurn, by sentinel.namespace
//
// Keys never become metric attributes (unbounded cardinality); they are on
// the spans (unless WithoutKeys): one span per Once call ("sentinel.Once": sentinel.key,
// sentinel.namespace, sentinel.token, sentinel.outcome; fn's context is its
// child) and one per lease acquisition or adoption ("sentinel.Lease": sentinel.key,
// sentinel.namespace, sentinel.result, sentinel.wait, sentinel.token when
// acquired). A span's status is Error only for a failure: a Once outcome
// uncertain, commit_unknown (the database did not confirm an OnceTx
// commit), result_lost or error, a lease result error. A rerun_pending
// span is not an error (the next caller with WithRerun runs fn again, as
// designed); fn's error is recorded on it as an event. An outcome the
// caller expects (cached, final, in_progress, ...; held, stale, hard_ttl:
// its error is recorded as an event), its own ctx ending first (canceled),
// or the client's Close (closed) leaves it Unset. An Error span carries
// error.type, as OpenTelemetry's conventions for recording errors ask: a
// Once span its outcome (uncertain, commit_unknown, result_lost, error),
// a Lease span invalid (bad input), timeout or database.
//
// The hooks go in pairs: OnceEnd and LeaseEnd end the span in the ctx
// that OnceStart and LeaseStart returned, so take both of a pair from
// the same Observer (or neither); an OnceEnd without its OnceStart would
// end whatever span the caller's ctx holds, an HTTP request's say.
// A fencing refusal is recorded as an event on the span in the checking
// call's context.
package otelsentinel

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/shell"
)

// ScopeName is the instrumentation scope of the meter and tracer. Their
// scope's version is sentinel.Version.
const ScopeName = "github.com/sentinel-coordination/sentinel/otelsentinel"

// Attribute keys.
const (
	AttrNamespace = attribute.Key("sentinel.namespace")
	AttrKey       = attribute.Key("sentinel.key")
	AttrToken     = attribute.Key("sentinel.token")
	AttrOutcome   = attribute.Key("sentinel.outcome")
	AttrResult    = attribute.Key("sentinel.result")
	AttrWait      = attribute.Key("sentinel.wait")
	AttrLeaseKind = attribute.Key("sentinel.lease.kind")
	AttrReason    = attribute.Key("sentinel.reason")
	AttrGroup     = attribute.Key("sentinel.group")
	AttrRole      = attribute.Key("sentinel.role")
	AttrErrorType = attribute.Key("error.type")
)

type config struct {
	mp     metric.MeterProvider
	tp     trace.TracerProvider
	noKeys bool
}

// Option configures NewObserver.
type Option func(*config)

// WithMeterProvider sets the MeterProvider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the TracerProvider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithoutKeys leaves keys (sentinel.key) off the spans and the fencing
// refusals' span events, for keys a trace backend must not keep: the
// idempotency middleware's execution keys carry the HTTP client's
// Idempotency-Key and its principal, say. The error events on the spans
// (exception.message) name the key as Sentinel's errors do, quoted and
// in a `sentinel inspect` command line: with WithoutKeys it is withheld
// there too ("<key withheld>"); the text of fn's own error, which such an
// event may include, is the application's and is recorded as it is.
// Default: keys are on the spans (never on metrics).
func WithoutKeys() Option { return func(c *config) { c.noKeys = true } }

type observer struct {
	tracer trace.Tracer
	noKeys bool         // WithoutKeys
	attrs  sync.Map     // attrKey -> metric.MeasurementOption, built once per combination
	cached atomic.Int64 // entries in attrs, at most maxCachedAttrs

	onceCalls, leaseAcq, leaseLosses, relFailures, termChanges, fencing metric.Int64Counter
	onceDur, leaseWait, hbDur, queueWait                                metric.Float64Histogram
	hbBatch, queueDepth                                                 metric.Int64Histogram
}

// NewObserver returns a sentinel.Observer that records metrics and spans.
// Set it as Config.Observer. It fails only when an instrument cannot be
// created.
func NewObserver(opts ...Option) (*sentinel.Observer, error) {
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.mp == nil {
		cfg.mp = otel.GetMeterProvider()
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	m := cfg.mp.Meter(ScopeName, metric.WithInstrumentationVersion(sentinel.Version))
	o := &observer{tracer: cfg.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(sentinel.Version)), noKeys: cfg.noKeys}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
		errs = append(errs, err)
		return h
	}
	count := func(name, unit, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit(unit), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000))
		errs = append(errs, err)
		return h
	}
	o.onceCalls = counter("sentinel.once.calls", "{call}", "Once and OnceTx calls by outcome")
	o.onceDur = seconds("sentinel.once.duration", "Duration of Once and OnceTx calls")
	o.leaseAcq = counter("sentinel.lease.acquisitions", "{call}", "Lease calls by result")
	o.leaseWait = seconds("sentinel.lease.wait.duration", "Time a waiting Lease call took to acquire")
	o.leaseLosses = counter("sentinel.lease.losses", "{lease}", "Leases, execution leases, terms, member rows and tickets lost")
	o.relFailures = counter("sentinel.lease.release_failures", "{lease}",
		"Release statements that failed for a lease or turn its holder was done with (not a loss)")
	o.hbDur = seconds("sentinel.heartbeat.duration", "Latency of heartbeat renewal statements")
	o.hbBatch = count("sentinel.heartbeat.batch_size", "{row}", "Rows sent for renewal per successful heartbeat statement")
	o.queueWait = seconds("sentinel.queue.wait.duration", "Time from drawing a queue ticket to its grant")
	o.queueDepth = count("sentinel.queue.depth", "{ticket}", "Live tickets ahead of a queue ticket when it was drawn")
	o.termChanges = counter("sentinel.election.term_changes", "{term}", "Leadership terms seen by electors")
	o.fencing = counter("sentinel.fencing.refusals", "{check}", "Stale fencing tokens refused")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("otelsentinel: %w", err)
	}
	return &sentinel.Observer{
		OnceStart:      o.onceStart,
		OnceEnd:        o.onceEnd,
		LeaseStart:     o.leaseStart,
		LeaseEnd:       o.leaseEnd,
		LeaseLost:      o.leaseLost,
		ReleaseFailed:  o.releaseFailed,
		Heartbeat:      o.heartbeat,
		FencingRefused: o.fencingRefused,
		QueueGranted:   o.queueGranted,
		TermChanged:    o.termChanged,
	}, nil
}

// attrKey identifies a combination of low-cardinality metric attributes.
type attrKey struct {
	kind, a, b, ns string
}

// maxCachedAttrs bounds measure's cache: namespaces are a small, fixed
// set in practice, but the cache must not grow with whatever a caller
// passes (a refused call's namespace is measured too). Past the bound, a
// combination not yet cached is built at each call, as without a cache.
const maxCachedAttrs = 1024

// measure returns the attribute option for k, built once: a call then
// allocates no attribute set. build is called only the first time (every
// time for a combination met after the cache is full).
func (o *observer) measure(k attrKey, build func() []attribute.KeyValue) metric.MeasurementOption {
	if v, ok := o.attrs.Load(k); ok {
		return v.(metric.MeasurementOption)
	}
	opt := metric.WithAttributeSet(attribute.NewSet(build()...))
	if o.cached.Add(1) > maxCachedAttrs {
		o.cached.Add(-1)
		return opt
	}
	v, loaded := o.attrs.LoadOrStore(k, opt)
	if loaded {
		o.cached.Add(-1) // another call stored it first
	}
	return v.(metric.MeasurementOption)
}

// startSpan starts a span; its attributes are built only when it records,
// so a no-op or unsampled tracer costs no attribute allocations.
func (o *observer) startSpan(ctx context.Context, name, ns, key string) context.Context {
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	if span.IsRecording() {
		span.SetAttributes(AttrNamespace.String(ns))
		if !o.noKeys {
			span.SetAttributes(AttrKey.String(key))
		}
	}
	return ctx
}

func (o *observer) onceStart(ctx context.Context, ns, key string) context.Context {
	return o.startSpan(ctx, "sentinel.Once", ns, key)
}

func (o *observer) onceEnd(ctx context.Context, e sentinel.OnceEvent) {
	attrs := o.measure(attrKey{kind: "once", a: string(e.Outcome), ns: e.Namespace}, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrOutcome.String(string(e.Outcome)), AttrNamespace.String(e.Namespace)}
	})
	o.onceCalls.Add(ctx, 1, attrs)
	o.onceDur.Record(ctx, e.Duration.Seconds(), attrs)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(AttrOutcome.String(string(e.Outcome)), AttrToken.Int64(e.Token))
	switch e.Outcome {
	case sentinel.OutcomeRan, sentinel.OutcomeCached, sentinel.OutcomeFinal, sentinel.OutcomeInProgress,
		sentinel.OutcomeReconciling, sentinel.OutcomeRetryable:
		// Expected outcomes of a coordination call, not failures of Sentinel.
	case sentinel.OutcomeCanceled, sentinel.OutcomeClosed:
		if e.Err != nil {
			o.recordError(span, e.Err, e.Key) // what the caller was told; it gave up, nothing failed
		}
	case sentinel.OutcomeRerunPending:
		// The next caller with WithRerun runs it again, as designed: no
		// failure to page on, but the trace says why the attempt stopped.
		if e.Err != nil {
			o.recordError(span, e.Err, e.Key)
		}
	default:
		if e.Err != nil {
			o.recordError(span, e.Err, e.Key)
			span.SetAttributes(AttrErrorType.String(string(e.Outcome)))
			span.SetStatus(codes.Error, string(e.Outcome))
		}
	}
	span.End()
}

func (o *observer) leaseStart(ctx context.Context, ns, key string) context.Context {
	return o.startSpan(ctx, "sentinel.Lease", ns, key)
}

func (o *observer) leaseEnd(ctx context.Context, e sentinel.LeaseEvent) {
	result := "acquired"
	switch {
	case e.Acquired && e.Adopted:
		result = "adopted"
	case e.Acquired:
	case e.Adopted && errors.Is(e.Err, sentinel.ErrStaleToken):
		result = "stale" // expected: the lease expired in transit, or was adopted already
	case e.Adopted && errors.Is(e.Err, sentinel.ErrHardTTL):
		// Expected: the lease's hard expiry is within the margin of the
		// TTL asked, so AdoptHandle gave it back (the word lease.losses
		// uses for that reason; this is no loss: nobody held the Lease).
		result = "hard_ttl"
	case errors.Is(e.Err, sentinel.ErrNotAcquired):
		result = "held"
	case errors.Is(e.Err, sentinel.ErrClosed):
		result = "closed" // the client was closed: Close ended the wait, or the call came after it
	case ctx.Err() != nil:
		result = "canceled" // the caller's ctx ended (cancelled, or its deadline passed): it gave up
	default:
		result = "error"
	}
	wait := strconv.FormatBool(e.Wait)
	o.leaseAcq.Add(ctx, 1, o.measure(attrKey{kind: "lease", a: result, b: wait, ns: e.Namespace}, func() []attribute.KeyValue {
		return []attribute.KeyValue{AttrResult.String(result), AttrWait.Bool(e.Wait), AttrNamespace.String(e.Namespace)}
	}))
	if e.Wait && e.Acquired {
		o.leaseWait.Record(ctx, e.Duration.Seconds(), o.measure(attrKey{kind: "ns", ns: e.Namespace}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrNamespace.String(e.Namespace)}
		}))
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(AttrResult.String(result), AttrWait.Bool(e.Wait))
		switch {
		case e.Acquired:
			span.SetAttributes(AttrToken.Int64(e.Token))
		case e.Err == nil:
		case result == "error":
			o.recordError(span, e.Err, e.Key)
			span.SetAttributes(AttrErrorType.String(leaseErrorType(e.Err)))
			span.SetStatus(codes.Error, "lease acquisition failed")
		default:
			// held (by whom), stale, hard_ttl, canceled, closed: what the
			// caller was told; no failure, so no Error status.
			o.recordError(span, e.Err, e.Key)
		}
	}
	span.End()
}

// recordError records err as an exception event on span; with
// WithoutKeys, with key withheld from its message (see WithoutKeys).
func (o *observer) recordError(span trace.Span, err error, key string) {
	if !o.noKeys || key == "" {
		span.RecordError(err)
		return
	}
	span.AddEvent("exception", trace.WithAttributes(
		attribute.String("exception.type", exceptionType(err)),
		attribute.String("exception.message", withholdKey(err.Error(), key))))
}

// withheldKey replaces a key in an error message under WithoutKeys.
const withheldKey = "<key withheld>"

// withholdKey returns msg with key withheld where Sentinel's errors name
// it: quoted (%q), and in the `sentinel inspect` command line of an
// uncertain key (shell-quoted, after "inspect " or "-- ").
func withholdKey(msg, key string) string {
	msg = strings.ReplaceAll(msg, strconv.Quote(key), strconv.Quote(withheldKey))
	q := shell.Quote(key)
	msg = strings.ReplaceAll(msg, "sentinel inspect "+q, "sentinel inspect "+withheldKey)
	return strings.ReplaceAll(msg, " -- "+q, " -- "+withheldKey)
}

// exceptionType is err's exception.type, as the SDK's RecordError
// names it.
func exceptionType(err error) string {
	t := reflect.TypeOf(err)
	if t.PkgPath() == "" && t.Name() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

func (o *observer) leaseLost(e sentinel.LeaseLoss) {
	kind, reason := e.Kind, "lost"
	if kind == "" { // an event built without Kind
		kind = sentinel.LossLease
		if e.Execution {
			kind = sentinel.LossExecution
		}
	}
	switch {
	case errors.Is(e.Err, sentinel.ErrHardTTL):
		reason = "hard_ttl"
	case errors.Is(e.Err, sentinel.ErrClosed):
		reason = "closed" // Client.Close ended it (a running Once's execution lease)
	}
	o.leaseLosses.Add(context.Background(), 1, metric.WithAttributes(AttrLeaseKind.String(string(kind)),
		AttrReason.String(reason), AttrNamespace.String(e.Namespace)))
}

func (o *observer) releaseFailed(e sentinel.ReleaseFailure) {
	kind := e.Kind
	if kind == "" {
		kind = sentinel.LossLease
	}
	o.relFailures.Add(context.Background(), 1, metric.WithAttributes(AttrLeaseKind.String(string(kind)),
		AttrNamespace.String(e.Namespace)))
}

func (o *observer) heartbeat(e sentinel.HeartbeatEvent) {
	ctx := context.Background()
	if e.Err != nil {
		o.hbDur.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(AttrErrorType.String(errorType(e.Err))))
		return
	}
	o.hbDur.Record(ctx, e.Duration.Seconds())
	o.hbBatch.Record(ctx, int64(e.Rows))
}

// leaseErrorType is a failed Lease span's error.type: invalid for bad
// input, else errorType's.
func leaseErrorType(err error) string {
	if errors.Is(err, sentinel.ErrInvalid) {
		return "invalid"
	}
	return errorType(err)
}

// errorType is a low-cardinality error.type value.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "database"
}

func (o *observer) fencingRefused(ctx context.Context, e sentinel.FencingRefusal) {
	o.fencing.Add(ctx, 1, metric.WithAttributes(AttrNamespace.String(e.Namespace)))
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		attrs := []attribute.KeyValue{AttrNamespace.String(e.Namespace), AttrToken.Int64(e.Token), attribute.Int64("sentinel.token.current", e.Current)}
		if !o.noKeys {
			attrs = append(attrs, AttrKey.String(e.Key))
		}
		span.AddEvent("sentinel.fencing_refused", trace.WithAttributes(attrs...))
	}
}

func (o *observer) queueGranted(e sentinel.QueueGrant) {
	ctx := context.Background()
	attrs := metric.WithAttributes(AttrNamespace.String(e.Namespace))
	o.queueWait.Record(ctx, e.Wait.Seconds(), attrs)
	if e.Ahead >= 0 {
		o.queueDepth.Record(ctx, int64(e.Ahead), attrs)
	}
}

func (o *observer) termChanged(e sentinel.TermChange) {
	role := "follower"
	switch {
	case e.Demoted && e.Err == nil:
		role = "resigned" // Resign, Run's ctx ended, Client.Close
	case e.Demoted:
		role = "demoted"
	case e.Self:
		role = "elected"
	}
	o.termChanges.Add(context.Background(), 1, metric.WithAttributes(AttrNamespace.String(e.Namespace),
		AttrGroup.String(e.Group), AttrRole.String(role)))
}
