package sentinel_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Option documents that an option a call does not take is refused with
// ErrInvalid before anything is written, and each call lists the options
// it takes. The reads, the fencing checks, the queue views, the
// reconciliation steps and Prune took options they never use (WithForce
// on Reconcile, WithWait on Holder, WithLabel on Prune, WithTTL on Queue)
// and ignored them.
func TestCallsRefuseOptionsTheyDoNotTake(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sentineltest.New(t)
	pool := sentineltest.Pool(t)

	all := map[string]sentinel.Option{
		"WithTTL":        sentinel.WithTTL(time.Second),
		"WithHardTTL":    sentinel.WithHardTTL(time.Minute),
		"WithWait":       sentinel.WithWait(),
		"WithForce":      sentinel.WithForce(),
		"WithCodec":      sentinel.WithCodec(sentinel.JSONCodec{}),
		"WithMetadata":   sentinel.WithMetadata(map[string]any{"reason": "x"}),
		"WithToken":      sentinel.WithToken(1),
		"WithLabel":      sentinel.WithLabel("x"),
		"WithAfterEvent": sentinel.WithAfterEvent(0),
		"WithRerun":      sentinel.WithRerun(2),
	}
	calls := []struct {
		name  string
		takes []string // beside WithNamespace
		call  func(o sentinel.Option) error
	}{
		// Inspect and LastRun take an operator's WithToken and WithMetadata
		// (idempotency.Resolve passes one set of options to the reads and
		// the writes), and they have no effect there.
		{"Inspect", []string{"WithMetadata", "WithToken"}, func(o sentinel.Option) error { _, err := c.Inspect(ctx, "k", o); return err }},
		{"LastRun", []string{"WithMetadata", "WithToken"}, func(o sentinel.Option) error { _, err := c.LastRun(ctx, "k", o); return err }},
		{"History", nil, func(o sentinel.Option) error { _, err := c.History(ctx, "k", o); return err }},
		{"Holder", nil, func(o sentinel.Option) error { _, err := c.Holder(ctx, "k", o); return err }},
		{"ResultType", nil, func(o sentinel.Option) error { _, err := c.ResultType(ctx, "k", o); return err }},
		{"Leader", nil, func(o sentinel.Option) error { _, err := c.Leader(ctx, "g", o); return err }},
		{"Members", nil, func(o sentinel.Option) error { _, err := c.Members(ctx, "g", o); return err }},
		{"Queue", nil, func(o sentinel.Option) error { _, err := c.Queue(ctx, "r", o); return err }},
		{"QueueHistory", nil, func(o sentinel.Option) error { _, err := c.QueueHistory(ctx, "r", 0, 10, o); return err }},
		{"ResetQueue", nil, func(o sentinel.Option) error { _, err := c.ResetQueue(ctx, "r", o); return err }},
		{"VerifyToken", nil, func(o sentinel.Option) error { return c.VerifyToken(ctx, pool, "k", 1, o) }},
		{"VerifyExecutionToken", nil, func(o sentinel.Option) error { return c.VerifyExecutionToken(ctx, pool, "k", 1, o) }},
		{"VerifyTurn", nil, func(o sentinel.Option) error { return c.VerifyTurn(ctx, pool, "r", 1, o) }},
		{"VerifyTerm", []string{"WithTTL"}, func(o sentinel.Option) error { return c.VerifyTerm(ctx, pool, "g", 1, o) }},
		{"Reconcile", []string{"WithMetadata", "WithToken"}, func(o sentinel.Option) error { _, err := c.Reconcile(ctx, "k", o); return err }},
		{"ResetToClaimed", []string{"WithMetadata", "WithToken"}, func(o sentinel.Option) error { return c.ResetToClaimed(ctx, "k", o) }},
		{"ForceComplete", []string{"WithMetadata", "WithToken", "WithCodec"}, func(o sentinel.Option) error { return c.ForceComplete(ctx, "k", 1, o) }},
		{"SetResult", []string{"WithMetadata", "WithToken", "WithCodec"}, func(o sentinel.Option) error { return c.SetResult(ctx, "k", 1, o) }},
		{"Prune", nil, func(o sentinel.Option) error { _, err := c.Prune(ctx, time.Hour, o); return err }},
	}
	for _, tc := range calls {
		takes := map[string]bool{}
		for _, n := range tc.takes {
			takes[n] = true
		}
		for name, o := range all {
			err := tc.call(o)
			switch refused := errors.Is(err, sentinel.ErrInvalid); {
			case takes[name] && refused:
				t.Errorf("%s refused %s, which it takes: %v", tc.name, name, err)
			case !takes[name] && !refused:
				t.Errorf("%s took %s, which it does not use (err %v); want ErrInvalid", tc.name, name, err)
			}
		}
		if err := tc.call(sentinel.WithNamespace("default")); errors.Is(err, sentinel.ErrInvalid) {
			t.Errorf("%s refused WithNamespace: %v", tc.name, err)
		}
	}
}

// The queue's calls refused an option they do not take with "WithHardTTL,
// WithWait, WithForce, WithCodec, WithMetadata, WithToken and
// WithAfterEvent do not apply here" (or "only WithNamespace applies
// here"), whatever was given and to whichever call; they now name the
// option given and the call, as the other calls do.
func TestQueueCallsNameTheOptionTheyRefuse(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sentineltest.New(t)
	for call, f := range map[string]func() error{
		"Turn":        func() error { _, err := c.Turn(ctx, "r", sentinel.WithWait()); return err },
		"TurnAll":     func() error { _, err := c.TurnAll(ctx, []string{"r"}, sentinel.WithWait()); return err },
		"Queue":       func() error { _, err := c.Queue(ctx, "r", sentinel.WithWait()); return err },
		"Queues":      func() error { _, err := c.Queues(ctx, sentinel.WithWait()); return err },
		"ResetQueues": func() error { _, err := c.ResetQueues(ctx, sentinel.WithWait()); return err },
		"FollowQueues": func() error {
			return c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, sentinel.WithWait())
		},
	} {
		err := f()
		if !errors.Is(err, sentinel.ErrInvalid) || !strings.Contains(err.Error(), "WithWait: not an option of "+call) {
			t.Errorf("%s with WithWait: %v; want ErrInvalid naming WithWait and %s", call, err, call)
		}
	}
}
