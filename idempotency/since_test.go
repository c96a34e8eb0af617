package idempotency_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// Resolve's refusal of a key that is not uncertain or reconciling carries
// the key's Since as the operator's tools show it (Execution.Since): for
// a key handed back by a caller that gave up after its lease ended, the
// lease's end, not updated_at (as sentinel idempotency inspect says).
func TestResolveRefusalSinceIsTheLeaseEnd(t *testing.T) {
	c := sentineltest.New(t)
	ctx := ctxT(t)
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant}, func(w http.ResponseWriter, r *http.Request) {
		idempotency.Uncertain(w, errors.New("the card network timed out"))
	})
	do(t, srv, "POST", "/charges", "pay-1", "x")
	var updated, leaseEnd time.Time
	if err := sentineltest.Pool(t).QueryRow(ctx, "UPDATE "+pgx.Identifier{sentineltest.Schema(t), "executions"}.Sanitize()+
		` SET state = 'claimed', updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = $1 RETURNING updated_at, lease_expires_at`, idempotency.ExecutionKey("", "pay-1")).Scan(&updated, &leaseEnd); err != nil {
		t.Fatal(err)
	}
	rec, err := idempotency.Inspect(ctx, c, "", "pay-1")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := idempotency.NewResponse(rec.Request.Fingerprint, 201, nil, []byte("done"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = idempotency.Resolve(ctx, c, "", "pay-1", resp)
	var ee *sentinel.ExecutionError
	if !errors.As(err, &ee) || !errors.Is(err, sentinel.ErrWrongState) {
		t.Fatalf("resolve of a handed-back key: %v", err)
	}
	if !ee.Since.Equal(leaseEnd) {
		t.Fatalf("Since %v, want the lease's end %v (updated_at %v)", ee.Since, leaseEnd, updated)
	}
	if !rec.Execution.Since().Equal(ee.Since) {
		t.Fatalf("Since %v, the record's Execution.Since %v", ee.Since, rec.Execution.Since())
	}
}
