package sentinel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/internal/ctxcalls"
)

// beginSpy is an SQLBeginner that counts the transactions asked of it.
type beginSpy struct{ n atomic.Int64 }

func (b *beginSpy) BeginTx(context.Context, *sql.TxOptions) (*sql.Tx, error) {
	b.n.Add(1)
	return nil, errors.New("beginSpy: no database")
}

// Every exported call that takes a ctx refuses a nil one with an error
// matching ErrInvalid that names the call, before it sends a statement,
// runs fn or changes what the client holds; a nil ctx panicked in most of
// them. The calls that return no error answer for a nil ctx as outside fn
// (TokenFromContext, Attempt, EffectKey) or return a ctx already ended
// with the refusal as its cause (the Context methods).
// TestNilContextTableIsComplete keeps the tables whole.
func TestNilContextRefusedByEveryCall(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	h := e.client(nil) // holds what the calls on held things are given
	var sent counter   // the statements of the refusing client's pool
	p := e.pool(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = &sent })
	c := e.clientOn(p, nil)

	l, err := h.Lease(ctx, "k")
	require.NoError(t, err)
	turn, err := h.Turn(ctx, "printer")
	require.NoError(t, err)
	set, err := h.TurnAll(ctx, []string{"a", "b"})
	require.NoError(t, err)
	el, err := c.Elector("g", sentinel.ElectorOptions{})
	require.NoError(t, err)
	leader, err := e.client(nil).Elector("led", sentinel.ElectorOptions{})
	require.NoError(t, err)
	runElector(t, leader)
	waitFor(t, 30*time.Second, "a leader", leader.IsLeader)
	_, err = sentinel.Once(ctx, h, "done", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	tx, err := p.Begin(ctx) // for MigrateTx
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	spy := &beginSpy{}
	var ran atomic.Int64 // fn's runs
	before := sent.n.Load()

	var nilCtx context.Context // a nil ctx is the point
	h1 := l.Handle()
	refused := nilCtxRefusals(nilCtx, c, l, turn, set, el, leader, h1, p, tx, spy, &ran, e.schema)
	for _, name := range slices.Sorted(maps.Keys(refused)) {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			return refused[name]()
		}()
		var inv *sentinel.InvalidError
		if assert.ErrorIs(t, err, sentinel.ErrInvalid, name) && assert.ErrorAs(t, err, &inv, name) {
			assert.Equal(t, "ctx", inv.Field, name)
			assert.Contains(t, err.Error(), name, "the error names the call")
		}
	}
	answered := nilCtxAnswers(nilCtx, l, turn, set)
	for _, name := range slices.Sorted(maps.Keys(answered)) {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			return answered[name]()
		}()
		assert.NoError(t, err, name)
	}
	if t.Failed() {
		return
	}

	require.Equal(t, before, sent.n.Load(), "a refused call sent a statement")
	require.Zero(t, spy.n.Load(), "OnceSQLTx began a transaction")
	require.Zero(t, ran.Load(), "fn ran")
	require.NoError(t, l.Err(), "the lease is still held")
	require.NoError(t, turn.Err(), "the turn is still held")
	require.NoError(t, set.Err(), "the turns are still held")
	require.True(t, leader.IsLeader(), "the leader still leads")
	require.Equal(t, 1, e.count("leases", "key = 'k'"))
	require.Equal(t, 3, e.count("tickets", ""))
	require.Zero(t, e.count("members", "election = 'g'"), "Run(nil) joined the election")
	require.Equal(t, 1, e.count("executions", ""), "only the key done")
	require.Equal(t, 1, e.count("executions", "key = 'done' AND state = 'completed'"))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, turn.Release(ctx))
	require.NoError(t, set.Release(ctx))
}

// nilCtxRefusals is every exported call of the package that takes a ctx
// and returns an error, called with ctx (nil), by its name.
func nilCtxRefusals(ctx context.Context, c *sentinel.Client, l *sentinel.Lease, turn *sentinel.Turn,
	set *sentinel.TurnSet, el, leader *sentinel.Elector, h sentinel.LeaseHandle, q sentinel.Querier,
	tx pgx.Tx, db sentinel.SQLBeginner, ran *atomic.Int64, schema string) map[string]func() error {
	fn := func(context.Context) (int, error) { ran.Add(1); return 1, nil }
	errOf := func(_ any, err error) error { return err }
	return map[string]func() error{
		"Once":      func() error { return errOf(sentinel.Once(ctx, c, "k1", fn)) },
		"OnceRetry": func() error { return errOf(sentinel.OnceRetry(ctx, c, "k1", fn, sentinel.RetryOptions{})) },
		"OnceTx": func() error {
			return errOf(sentinel.OnceTx(ctx, c, "k1", func(context.Context, pgx.Tx) (int, error) { ran.Add(1); return 1, nil }))
		},
		"OnceSQLTx": func() error {
			return errOf(sentinel.OnceSQLTx(ctx, c, db, "k1", func(context.Context, *sql.Tx) (int, error) { ran.Add(1); return 1, nil }))
		},
		"Retry": func() error {
			return sentinel.Retry(ctx, sentinel.RetryOptions{}, func(context.Context) error { ran.Add(1); return nil })
		},
		"MigrateTx":          func() error { return sentinel.MigrateTx(ctx, tx, schema+"_other") },
		"RegisterResultType": func() error { return sentinel.RegisterResultType[int](ctx, c, "typed:") },

		"Client.Lease":   func() error { return errOf(c.Lease(ctx, "k1")) },
		"Client.Turn":    func() error { return errOf(c.Turn(ctx, "r")) },
		"Client.TurnAll": func() error { return errOf(c.TurnAll(ctx, []string{"r", "s"})) },
		"Client.Do": func() error {
			return c.Do(ctx, "k1", func(context.Context, *sentinel.Lease) error { ran.Add(1); return nil })
		},
		"Client.Holder":        func() error { return errOf(c.Holder(ctx, "k")) },
		"Client.AdoptHandle":   func() error { return errOf(c.AdoptHandle(ctx, h)) },
		"Client.RenewHandle":   func() error { return errOf(c.RenewHandle(ctx, h, time.Minute)) },
		"Client.ReleaseHandle": func() error { return c.ReleaseHandle(ctx, h) },
		"Client.Leases":        func() error { return errOf(c.Leases(ctx, sentinel.LeaseFilter{})) },
		"Client.VerifyToken":   func() error { return c.VerifyToken(ctx, q, "k", h.Token) },
		"Client.VerifyExecutionToken": func() error {
			return c.VerifyExecutionToken(ctx, q, "done", 1)
		},
		"Client.VerifyTurn": func() error { return c.VerifyTurn(ctx, q, "printer", 1) },
		"Client.VerifyTerm": func() error { return c.VerifyTerm(ctx, q, "led", 1) },
		"Client.Leader":     func() error { return errOf(c.Leader(ctx, "led")) },
		"Client.Members":    func() error { return errOf(c.Members(ctx, "led")) },
		"Client.Elections":  func() error { return errOf(c.Elections(ctx, sentinel.ElectionFilter{})) },

		"Client.Inspect":         func() error { return errOf(c.Inspect(ctx, "done")) },
		"Client.History":         func() error { return errOf(c.History(ctx, "done")) },
		"Client.LastRun":         func() error { return errOf(c.LastRun(ctx, "done")) },
		"Client.Prune":           func() error { return errOf(c.Prune(ctx, sentinel.MinRetention)) },
		"Client.ResultType":      func() error { return errOf(c.ResultType(ctx, "done")) },
		"Client.Reconcile":       func() error { return errOf(c.Reconcile(ctx, "done")) },
		"Client.ForceComplete":   func() error { return c.ForceComplete(ctx, "done", 2) },
		"Client.ResetToClaimed":  func() error { return c.ResetToClaimed(ctx, "done") },
		"Client.SetResult":       func() error { return c.SetResult(ctx, "done", 2) },
		"Client.Executions":      func() error { _, _, err := c.Executions(ctx, sentinel.ExecutionFilter{}); return err },
		"Client.ExecutionCounts": func() error { return errOf(c.ExecutionCounts(ctx, "", true)) },
		"Client.UncertainCounts": func() error { return errOf(c.UncertainCounts(ctx)) },
		"Client.AttentionCounts": func() error { return errOf(c.AttentionCounts(ctx)) },
		"Client.Follow": func() error {
			return c.Follow(ctx, sentinel.FollowFilter{}, func(sentinel.Event) error { ran.Add(1); return nil })
		},
		"Client.FollowHead":      func() error { return errOf(c.FollowHead(ctx)) },
		"Client.Migrate":         func() error { return c.Migrate(ctx) },
		"Client.MigrationStatus": func() error { return errOf(c.MigrationStatus(ctx)) },
		"Client.Queue":           func() error { return errOf(c.Queue(ctx, "printer")) },
		"Client.Queues":          func() error { return errOf(c.Queues(ctx)) },
		"Client.AllQueues":       func() error { return errOf(c.AllQueues(ctx)) },
		"Client.ResetQueue":      func() error { return errOf(c.ResetQueue(ctx, "printer")) },
		"Client.ResetQueues":     func() error { return errOf(c.ResetQueues(ctx)) },
		"Client.QueueHistory":    func() error { return errOf(c.QueueHistory(ctx, "printer", 0, 10)) },
		"Client.FollowQueues": func() error {
			return c.FollowQueues(ctx, []string{"printer"}, func(sentinel.QueueEvent) error { ran.Add(1); return nil })
		},

		"Lease.Release":   func() error { return l.Release(ctx) },
		"Lease.Heartbeat": func() error { return l.Heartbeat(ctx) },
		"Turn.Release":    func() error { return turn.Release(ctx) },
		"TurnSet.Release": func() error { return set.Release(ctx) },
		"Elector.Run":     func() error { return el.Run(ctx) },
		"Elector.Resign":  func() error { return leader.Resign(ctx) },
	}
}

// nilCtxAnswers is every exported call of the package that takes a ctx
// and returns no error, called with ctx (nil): each returns nil if it
// answered as documented.
func nilCtxAnswers(ctx context.Context, l *sentinel.Lease, turn *sentinel.Turn, set *sentinel.TurnSet) map[string]func() error {
	ended := func(f func(context.Context) (context.Context, context.CancelFunc)) error {
		got, cancel := f(ctx)
		defer cancel()
		select {
		case <-got.Done():
		default:
			return errors.New("the ctx returned for a nil parent is not done")
		}
		if err := context.Cause(got); !errors.Is(err, sentinel.ErrInvalid) {
			return fmt.Errorf("the ctx returned for a nil parent ended with %v, want ErrInvalid", err)
		}
		return nil
	}
	return map[string]func() error{
		"TokenFromContext": func() error {
			if tok, ok := sentinel.TokenFromContext(ctx); tok != 0 || ok {
				return fmt.Errorf("got %d, %v; want 0, false", tok, ok)
			}
			return nil
		},
		"Attempt": func() error {
			if n := sentinel.Attempt(ctx); n != 0 {
				return fmt.Errorf("got %d, want 0", n)
			}
			return nil
		},
		"EffectKey": func() error {
			if k := sentinel.EffectKey(ctx); k != "" {
				return fmt.Errorf("got %q, want \"\"", k)
			}
			return nil
		},
		"Lease.Context":   func() error { return ended(l.Context) },
		"Turn.Context":    func() error { return ended(turn.Context) },
		"TurnSet.Context": func() error { return ended(set.Context) },
	}
}

// The tables of TestNilContextRefusedByEveryCall name every exported call
// of the package that takes a context.Context, read from its source: a
// call added without a place in them (and so perhaps without the nil
// check) fails here.
func TestNilContextTableIsComplete(t *testing.T) {
	calls, err := ctxcalls.Exported(".")
	require.NoError(t, err)
	var nilCtx context.Context
	var ran atomic.Int64
	var tabled []string
	tabled = slices.AppendSeq(tabled, maps.Keys(nilCtxRefusals(nilCtx, nil, nil, nil, nil, nil, nil, sentinel.LeaseHandle{}, nil, nil, nil, &ran, "")))
	tabled = slices.AppendSeq(tabled, maps.Keys(nilCtxAnswers(nilCtx, nil, nil, nil)))
	slices.Sort(tabled)
	require.Equal(t, calls, tabled, "the exported calls taking a ctx, and the nil-ctx tables")
}
