package sentinel_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A call given an option it does not take, with a value that option would
// refuse, said what was wrong with the value (Queue with WithTTL(0): "TTL
// must be from MinTTL ... to MaxTTL"; Lease with WithToken(-1): "token must
// not be negative") instead of that the option does not apply to the call:
// the options were checked before the call refused the ones it does not
// take. Both are ErrInvalid; the refusal of the option must come first
// (InvalidError.Field "option").
func TestCallRefusesAnOptionItDoesNotTakeBeforeCheckingItsValue(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := sentineltest.New(t)
	pool := sentineltest.Pool(t)
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	l, err := c.Lease(ctx, "order-adopt", sentinel.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	h, err := l.Detach()
	if err != nil {
		t.Fatal(err)
	}

	// Each option with a value it refuses wherever it is taken.
	bad := map[string]sentinel.Option{
		"WithTTL":        sentinel.WithTTL(0),
		"WithHardTTL":    sentinel.WithHardTTL(-time.Second),
		"WithToken":      sentinel.WithToken(-1),
		"WithRerun":      sentinel.WithRerun(0),
		"WithLimit":      sentinel.WithLimit(0),
		"WithAfterEvent": sentinel.WithAfterEvent(-1),
		"WithLabel":      sentinel.WithLabel(strings.Repeat("x", sentinel.MaxLabelLen+1)),
	}
	never := func(context.Context) (int, error) { return 0, errors.New("fn must not run") }
	calls := []struct {
		name  string
		takes []string
		call  func(o sentinel.Option) error
	}{
		{"Lease", []string{"WithTTL", "WithHardTTL"}, func(o sentinel.Option) error { _, err := c.Lease(ctx, "order-lease", o); return err }},
		{"Do", []string{"WithTTL", "WithHardTTL"}, func(o sentinel.Option) error {
			return c.Do(ctx, "order-do", func(context.Context, *sentinel.Lease) error { return errors.New("fn must not run") }, o)
		}},
		{"Once", []string{"WithTTL", "WithHardTTL", "WithRerun"}, func(o sentinel.Option) error {
			_, err := sentinel.Once(ctx, c, "order-once", never, o)
			return err
		}},
		{"OnceTx", []string{"WithTTL", "WithHardTTL"}, func(o sentinel.Option) error {
			_, err := sentinel.OnceTx(ctx, c, "order-oncetx", func(context.Context, pgx.Tx) (int, error) { return never(ctx) }, o)
			return err
		}},
		{"OnceSQLTx", []string{"WithTTL", "WithHardTTL"}, func(o sentinel.Option) error {
			_, err := sentinel.OnceSQLTx(ctx, c, db, "order-oncesqltx", func(context.Context, *sql.Tx) (int, error) { return never(ctx) }, o)
			return err
		}},
		{"AdoptHandle", []string{"WithTTL"}, func(o sentinel.Option) error { _, err := c.AdoptHandle(ctx, h, o); return err }},
		{"Inspect", []string{"WithToken"}, func(o sentinel.Option) error { _, err := c.Inspect(ctx, "k", o); return err }},
		{"LastRun", []string{"WithToken"}, func(o sentinel.Option) error { _, err := c.LastRun(ctx, "k", o); return err }},
		{"History", []string{"WithLimit"}, func(o sentinel.Option) error { _, err := c.History(ctx, "k", o); return err }},
		{"Holder", nil, func(o sentinel.Option) error { _, err := c.Holder(ctx, "k", o); return err }},
		{"ResultType", nil, func(o sentinel.Option) error { _, err := c.ResultType(ctx, "k", o); return err }},
		{"Leader", nil, func(o sentinel.Option) error { _, err := c.Leader(ctx, "g", o); return err }},
		{"Members", nil, func(o sentinel.Option) error { _, err := c.Members(ctx, "g", o); return err }},
		{"Turn", []string{"WithTTL", "WithLabel"}, func(o sentinel.Option) error { _, err := c.Turn(ctx, "r", o); return err }},
		{"TurnAll", []string{"WithTTL", "WithLabel"}, func(o sentinel.Option) error { _, err := c.TurnAll(ctx, []string{"r"}, o); return err }},
		{"Queue", nil, func(o sentinel.Option) error { _, err := c.Queue(ctx, "r", o); return err }},
		{"Queues", nil, func(o sentinel.Option) error { _, err := c.Queues(ctx, o); return err }},
		{"QueueHistory", nil, func(o sentinel.Option) error { _, err := c.QueueHistory(ctx, "r", 0, 10, o); return err }},
		{"ResetQueue", nil, func(o sentinel.Option) error { _, err := c.ResetQueue(ctx, "r", o); return err }},
		{"ResetQueues", nil, func(o sentinel.Option) error { _, err := c.ResetQueues(ctx, o); return err }},
		{"FollowQueues", []string{"WithAfterEvent"}, func(o sentinel.Option) error {
			return c.FollowQueues(ctx, nil, func(sentinel.QueueEvent) error { return nil }, o)
		}},
		{"VerifyToken", nil, func(o sentinel.Option) error { return c.VerifyToken(ctx, pool, "k", 1, o) }},
		{"VerifyExecutionToken", nil, func(o sentinel.Option) error { return c.VerifyExecutionToken(ctx, pool, "k", 1, o) }},
		{"VerifyTurn", nil, func(o sentinel.Option) error { return c.VerifyTurn(ctx, pool, "r", 1, o) }},
		{"VerifyTerm", []string{"WithTTL"}, func(o sentinel.Option) error { return c.VerifyTerm(ctx, pool, "g", 1, o) }},
		{"Reconcile", []string{"WithToken"}, func(o sentinel.Option) error { _, err := c.Reconcile(ctx, "k", o); return err }},
		{"ResetToClaimed", []string{"WithToken"}, func(o sentinel.Option) error { return c.ResetToClaimed(ctx, "k", o) }},
		{"ForceComplete", []string{"WithToken"}, func(o sentinel.Option) error { return c.ForceComplete(ctx, "k", 1, o) }},
		{"SetResult", []string{"WithToken"}, func(o sentinel.Option) error { return c.SetResult(ctx, "k", 1, o) }},
		{"Prune", nil, func(o sentinel.Option) error { _, err := c.Prune(ctx, time.Hour, o); return err }},
	}
	for _, tc := range calls {
		takes := map[string]bool{}
		for _, n := range tc.takes {
			takes[n] = true
		}
		for name, o := range bad {
			err := tc.call(o)
			var inv *sentinel.InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, sentinel.ErrInvalid) {
				t.Errorf("%s with %s (a value it refuses): %v; want ErrInvalid", tc.name, name, err)
				continue
			}
			switch {
			case takes[name] && inv.Field == "option":
				t.Errorf("%s refused %s as an option it does not take: %v; want its value refused", tc.name, name, err)
			case !takes[name] && inv.Field != "option":
				t.Errorf("%s with %s: %v; want the option refused as one %s does not take (field \"option\"), not its value", tc.name, name, err, tc.name)
			}
		}
	}
}
