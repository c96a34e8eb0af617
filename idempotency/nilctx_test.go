package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/internal/ctxcalls"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// stmtCounter is a pgx tracer that counts the statements a pool sends.
type stmtCounter struct{ n atomic.Int64 }

func (s *stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Every exported call of the package that takes a ctx refuses a nil one
// with an error matching sentinel.ErrInvalid that names the call, before
// it sends a statement (they panicked); Tx, which returns no error, answers
// nil, as outside a transactional handler. TestNilContextTableIsComplete
// keeps the table whole.
func TestNilContextRefusedByEveryCall(t *testing.T) {
	var sent stmtCounter
	c := sentineltest.New(t, sentineltest.WithPoolConfig(func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = &sent }))
	before := sent.n.Load()
	var nilCtx context.Context // a nil ctx is the point
	calls := nilCtxCalls(nilCtx, c)
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		err := func() (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = fmt.Errorf("panicked: %v", r)
				}
			}()
			return calls[name]()
		}()
		if name == "Tx" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		var inv *sentinel.InvalidError
		switch {
		case !errors.Is(err, sentinel.ErrInvalid) || !errors.As(err, &inv):
			t.Errorf("%s: got %v, want an *InvalidError matching ErrInvalid", name, err)
		case inv.Field != "ctx" || !strings.Contains(err.Error(), "idempotency."+name):
			t.Errorf("%s: got %q, want the ctx refused by name", name, err)
		}
	}
	if n := sent.n.Load() - before; n != 0 {
		t.Errorf("the refused calls sent %d statements", n)
	}
}

// nilCtxCalls is every exported call of the package that takes a ctx,
// called with ctx (nil), by its name.
func nilCtxCalls(ctx context.Context, c *sentinel.Client) map[string]func() error {
	resp, err := idempotency.NewResponse("sha256:ab", 200, nil, []byte("{}"))
	if err != nil {
		panic(err)
	}
	return map[string]func() error{
		"Inspect": func() error { _, err := idempotency.Inspect(ctx, c, "acct", "k"); return err },
		"Resolve": func() error { _, err := idempotency.Resolve(ctx, c, "acct", "k", resp); return err },
		"Tx": func() error {
			if tx := idempotency.Tx(ctx); tx != nil {
				return fmt.Errorf("got %v, want nil", tx)
			}
			return nil
		},
	}
}

// The table of TestNilContextRefusedByEveryCall names every exported call
// of the package that takes a context.Context, read from its source.
func TestNilContextTableIsComplete(t *testing.T) {
	calls, err := ctxcalls.Exported(".")
	if err != nil {
		t.Fatal(err)
	}
	var nilCtx context.Context
	tabled := slices.Sorted(maps.Keys(nilCtxCalls(nilCtx, nil)))
	if !slices.Equal(calls, tabled) {
		t.Fatalf("exported calls taking a ctx %v, the nil-ctx table %v", calls, tabled)
	}
}
