package otelsentinel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/otelsentinel"
)

// An attempt under WithRerun that stopped without an outcome, attempts
// left, is rerun_pending: the next caller with WithRerun runs it again and
// no operator is needed (docs/operating.md tells SREs not to page on it).
// Its span is not an error (status Unset); fn's error is recorded on it as
// an event, so the trace still says why the attempt stopped. The last
// attempt is uncertain, status Error. Before, the rerun_pending span had
// status Error, so a trace UI's error rate (or an alert on it) counted
// every re-run that went as designed.
func TestRerunPendingSpanIsNoError(t *testing.T) {
	w := newWorld(t)
	ctx := ctxT(t)
	c := w.client(nil)
	fails := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	for range 2 {
		_, err := sentinel.Once(ctx, c, "pay", fails, sentinel.WithRerun(2))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	var spans []sdktrace.ReadOnlySpan
	for _, s := range w.spans.Ended() {
		if s.Name() == "sentinel.Once" {
			spans = append(spans, s)
		}
	}
	require.Len(t, spans, 2)
	require.Equal(t, "rerun_pending", spanAttr(spans[0], otelsentinel.AttrOutcome).AsString())
	require.Equal(t, codes.Unset, spans[0].Status().Code)
	require.NotEmpty(t, spans[0].Events(), "fn's error is recorded as an event")
	require.Equal(t, "exception", spans[0].Events()[0].Name)
	require.Equal(t, "uncertain", spanAttr(spans[1], otelsentinel.AttrOutcome).AsString())
	require.Equal(t, codes.Error, spans[1].Status().Code)
}
