package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// In transactional mode the handler's Tx is a transaction on a connection
// of the client's pool. What it sets with SET LOCAL (or set_config(...,
// true)) ends with the request; a plain SET (or set_config(..., false))
// commits with the response and stays on the connection, for whatever
// runs on it next (the next request's handler, the client's own claims).
// The middleware does not reset the pool's sessions (that is the pool
// owner's business): the docs (Tx, docs/http.md) say so, and this test
// keeps them true both ways.
func TestTransactionalHandlersSettingsOutliveTheRequestOnlyWithoutLocal(t *testing.T) {
	for _, tc := range []struct {
		set   string
		stays bool
	}{
		{"SET LOCAL myapp.tenant = 'acct_1'", false},
		{"SELECT set_config('myapp.tenant', 'acct_1', true)", false},
		{"SET myapp.tenant = 'acct_1'", true},
		{"SELECT set_config('myapp.tenant', 'acct_1', false)", true},
	} {
		t.Run(tc.set, func(t *testing.T) {
			c := sentineltest.New(t)
			srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true},
				func(w http.ResponseWriter, r *http.Request) {
					if _, err := idempotency.Tx(r.Context()).Exec(r.Context(), tc.set); err != nil {
						t.Error(err)
					}
					w.WriteHeader(http.StatusCreated)
				})
			if r := do(t, srv, "POST", "/orders", "k", "x"); r.status != http.StatusCreated {
				t.Fatalf("got %d %q, want 201", r.status, r.problem.Type)
			}
			found := false
			ctx := ctxT(t)
			for _, conn := range c.Pool().AcquireAllIdle(ctx) {
				var v string
				if err := conn.QueryRow(ctx, "SELECT coalesce(current_setting('myapp.tenant', true), '')").Scan(&v); err != nil {
					t.Error(err)
				}
				found = found || v == "acct_1"
				conn.Release()
			}
			if found != tc.stays {
				t.Fatalf("the handler's %q stays on the pool's connection: %v, want %v (as documented)", tc.set, found, tc.stays)
			}
		})
	}
}
