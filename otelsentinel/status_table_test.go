package otelsentinel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// Every Once outcome's span status, as the package documentation lists
// them: Error only for a failure (uncertain, commit_unknown: the database
// did not confirm an OnceTx commit, result_lost, error); Unset for the
// rest, whose error (if any) is an event. Driven through the observer's
// hooks, so every outcome is covered without the database.
func TestOnceSpanStatusPerOutcome(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := otelsentinel.NewObserver(otelsentinel.WithTracerProvider(tp), otelsentinel.WithMeterProvider(mp))
	require.NoError(t, err)
	failure := map[sentinel.OnceOutcome]bool{
		sentinel.OutcomeUncertain: true, sentinel.OutcomeCommitUnknown: true,
		sentinel.OutcomeResultLost: true, sentinel.OutcomeError: true,
	}
	all := []sentinel.OnceOutcome{sentinel.OutcomeRan, sentinel.OutcomeCached, sentinel.OutcomeFinal,
		sentinel.OutcomeInProgress, sentinel.OutcomeUncertain, sentinel.OutcomeReconciling,
		sentinel.OutcomeRetryable, sentinel.OutcomeError, sentinel.OutcomeResultLost,
		sentinel.OutcomeRerunPending, sentinel.OutcomeCommitUnknown, sentinel.OutcomeCanceled,
		sentinel.OutcomeClosed}
	for _, oc := range all {
		ctx := obs.OnceStart(context.Background(), "ns", "k")
		var e error
		if oc != sentinel.OutcomeRan && oc != sentinel.OutcomeCached {
			e = errors.New(string(oc))
		}
		obs.OnceEnd(ctx, sentinel.OnceEvent{Namespace: "ns", Key: "k", Outcome: oc, Err: e})
	}
	ended := spans.Ended()
	require.Len(t, ended, len(all))
	for i, s := range ended {
		want := codes.Unset
		if failure[all[i]] {
			want = codes.Error
		}
		require.Equal(t, want, s.Status().Code, "outcome %s", all[i])
		var errorType string
		for _, a := range s.Attributes() {
			if a.Key == otelsentinel.AttrErrorType {
				errorType = a.Value.AsString()
			}
		}
		if failure[all[i]] {
			require.Equal(t, string(all[i]), errorType, "an Error span's error.type is its outcome")
		} else {
			require.Empty(t, errorType, "outcome %s is no failure: no error.type", all[i])
		}
	}
}

// A failed Lease span carries error.type: invalid for bad input, database
// for the rest; a held one (no failure) carries none.
func TestLeaseSpanErrorType(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := otelsentinel.NewObserver(otelsentinel.WithTracerProvider(tp), otelsentinel.WithMeterProvider(mp))
	require.NoError(t, err)
	for _, e := range []error{
		fmt.Errorf("sentinel: lease: %w", sentinel.ErrInvalid),
		errors.New("connection refused"),
		fmt.Errorf("sentinel: lease: %w", sentinel.ErrNotAcquired),
	} {
		ctx := obs.LeaseStart(context.Background(), "ns", "k")
		obs.LeaseEnd(ctx, sentinel.LeaseEvent{Namespace: "ns", Key: "k", Err: e})
	}
	want := []string{"invalid", "database", ""}
	ended := spans.Ended()
	require.Len(t, ended, len(want))
	for i, s := range ended {
		var errorType string
		for _, a := range s.Attributes() {
			if a.Key == otelsentinel.AttrErrorType {
				errorType = a.Value.AsString()
			}
		}
		require.Equal(t, want[i], errorType, "span %d", i)
	}
}
