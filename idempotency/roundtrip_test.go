package idempotency_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// statements is a pgx tracer that counts the statements a pool sends.
type statements struct{ n atomic.Int64 }

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A request with a new key costs the statements of its Once and nothing
// more: the claim and the completion, two round trips. A repeat costs one
// (the replay). With Options.Rerun too: the re-run's guard reads nothing
// until a key is to be re-run.
func TestNewKeyCostsItsOnceOnly(t *testing.T) {
	for _, rerun := range []int{0, 3} {
		st := &statements{}
		c := sentineltest.New(t, sentineltest.WithPoolConfig(func(pc *pgxpool.Config) { pc.ConnConfig.Tracer = st }))
		srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Rerun: rerun}, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"ch_1"}`))
		})
		key := "new-key-" + string(rune('a'+rerun))
		st.n.Store(0)
		if r := do(t, srv, "POST", "/charges", key, `{"amount":100}`); r.status != http.StatusCreated {
			t.Fatalf("Rerun %d: first request: %+v", rerun, r)
		}
		if n := st.n.Load(); n != 2 {
			t.Fatalf("Rerun %d: a new key sent %d statements, want 2 (Once's claim and completion)", rerun, n)
		}
		st.n.Store(0)
		if r := do(t, srv, "POST", "/charges", key, `{"amount":100}`); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" {
			t.Fatalf("Rerun %d: repeat: %+v", rerun, r)
		}
		if n := st.n.Load(); n != 1 {
			t.Fatalf("Rerun %d: a repeat sent %d statements, want 1", rerun, n)
		}
	}
}

// The same in transactional mode: a new key costs what sentinel.OnceTx
// costs for the same handler statements (the claim, begin, the
// completion, commit: four), plus the one statement that sets the
// handler's SET LOCAL timeouts back before the completion, as
// docs/http.md says: five round trips besides the handler's own. A repeat
// costs one (the replay).
func TestTransactionalNewKeyCostsItsOnceTxAndTheResetOnly(t *testing.T) {
	st := &statements{}
	c := sentineltest.New(t, sentineltest.WithPoolConfig(func(pc *pgxpool.Config) { pc.ConnConfig.Tracer = st }))
	ctx := ctxT(t)

	// What OnceTx itself costs for a fn that runs one statement.
	st.n.Store(0)
	if _, err := sentinel.OnceTx(ctx, c, "bare-oncetx", func(ctx context.Context, tx pgx.Tx) (int, error) {
		_, err := tx.Exec(ctx, "SELECT 1")
		return 1, err
	}); err != nil {
		t.Fatal(err)
	}
	onceTx := st.n.Load()
	if onceTx != 5 {
		t.Fatalf("OnceTx with one statement of fn sent %d statements, want 5 (the claim, begin, fn's, the completion, commit)", onceTx)
	}

	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true}, func(w http.ResponseWriter, r *http.Request) {
		if _, err := idempotency.Tx(r.Context()).Exec(r.Context(), "SELECT 1"); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	})
	st.n.Store(0)
	if r := do(t, srv, "POST", "/charges", "new-key-tx", `{"amount":100}`); r.status != http.StatusCreated {
		t.Fatalf("first request: %+v", r)
	}
	if n := st.n.Load(); n != onceTx+1 {
		t.Fatalf("a new key sent %d statements, want %d (OnceTx's %d, and the one that resets the handler's timeouts)", n, onceTx+1, onceTx)
	}
	st.n.Store(0)
	if r := do(t, srv, "POST", "/charges", "new-key-tx", `{"amount":100}`); r.status != http.StatusCreated || r.header.Get(idempotency.HeaderReplayed) != "true" {
		t.Fatalf("repeat: %+v", r)
	}
	if n := st.n.Load(); n != 1 {
		t.Fatalf("a repeat sent %d statements, want 1", n)
	}
}
