package idempotency_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
	"github.com/sentinel-coordination/sentinel/sentineltest"
)

// A transactional request whose connection is cut as its transaction
// commits (its backend terminated: a failover, an administrator), and whose
// key cannot be read back at once to learn whether the commit landed (the
// read cancelled, 57014), got 500 ProblemUncertain without Retry-After:
// "it will not be run again: an operator resolves it". Yet nothing needs
// an operator: the commit landed, and a repeat gets the stored response,
// or it did not, and the key, still held by this attempt, is free for the
// repeat once its lease expires. A passing failure of the store was told
// to the client as a permanent one; it is now 503 with Retry-After.
func TestTransactionalCommitOfUnknownOutcomeIsRetried(t *testing.T) {
	admin := sentineltest.Pool(t)
	schema := sentineltest.Schema(t)
	c := sentineltest.New(t)
	// A deferred constraint trigger, run by the commit: it waits a moment
	// (for the lock below to queue behind the transaction), then cuts its
	// own connection.
	if _, err := admin.Exec(ctxT(t), `CREATE TABLE `+pgx.Identifier{schema, "seats"}.Sanitize()+` (n int NOT NULL);
		CREATE FUNCTION `+pgx.Identifier{schema, "cut"}.Sanitize()+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_catalog.pg_sleep(0.5); PERFORM pg_catalog.pg_terminate_backend(pg_catalog.pg_backend_pid()); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER cut AFTER INSERT ON `+pgx.Identifier{schema, "seats"}.Sanitize()+` DEFERRABLE INITIALLY DEFERRED
			FOR EACH ROW WHEN (NEW.n = 1) EXECUTE FUNCTION `+pgx.Identifier{schema, "cut"}.Sanitize()+`()`); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var txPID atomic.Int32
	srv := serve(t, c, idempotency.Options{Scope: idempotency.SingleTenant, Transactional: true, TTL: time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			tx := idempotency.Tx(r.Context())
			var pid int32
			if err := tx.QueryRow(r.Context(), "SELECT pg_catalog.pg_backend_pid()").Scan(&pid); err != nil {
				t.Error(err)
			}
			if _, err := tx.Exec(r.Context(), "INSERT INTO "+pgx.Identifier{schema, "seats"}.Sanitize()+" (n) VALUES ($1)", n); err != nil {
				t.Error(err)
			}
			txPID.Store(pid)
			w.WriteHeader(http.StatusCreated)
		})

	// While the commit waits in the trigger, lock the store's table: the
	// lock is granted once the transaction is gone, and every read of the
	// key then waits for it, and is cancelled (SQLSTATE 57014).
	lockConn, err := admin.Acquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Release()
	var lockPID int32
	if err := lockConn.QueryRow(ctxT(t), "SELECT pg_catalog.pg_backend_pid()").Scan(&lockPID); err != nil {
		t.Fatal(err)
	}
	lockTx, err := lockConn.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lockTx.Rollback(context.Background()) }()
	locked := make(chan error, 1)
	stop, stopped := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-stopped }()
	var cancelled atomic.Int64
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				locked <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			var sleeping bool
			if pid := txPID.Load(); pid != 0 && admin.QueryRow(context.Background(), "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND wait_event = 'PgSleep')", pid).Scan(&sleeping) == nil && sleeping {
				break
			}
		}
		_, err := lockTx.Exec(context.Background(), "LOCK TABLE "+pgx.Identifier{schema, "executions"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
		locked <- err
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int64
			if admin.QueryRow(context.Background(), `SELECT count(pg_catalog.pg_cancel_backend(pid)) FROM pg_catalog.pg_stat_activity
				WHERE pid <> pg_catalog.pg_backend_pid() AND pid <> $1 AND wait_event_type = 'Lock' AND query LIKE $2`,
				lockPID, "%"+schema+"%executions%").Scan(&n) == nil {
				cancelled.Add(n)
			}
		}
	}()
	first := do(t, srv, "POST", "/seats", "seat-1", "x")
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	_ = lockTx.Rollback(context.Background())
	if cancelled.Load() == 0 {
		t.Fatalf("no read of the key was cancelled (got %d %s): the test did not reproduce the failure", first.status, first.body)
	}
	t.Logf("%d %s", first.status, first.body)
	if first.err != nil || first.status == http.StatusInternalServerError || first.status < 500 {
		t.Errorf("a commit cut by a failover got %d %q (%v): a client is told its request failed for good", first.status, first.problem.Type, first.err)
	}
	if first.header.Get("Retry-After") == "" {
		t.Errorf("%d %q without Retry-After", first.status, first.problem.Type)
	}
	if strings.Contains(first.body, "operator") {
		t.Errorf("sent to an operator, though the repeat gets the outcome: %s", first.body)
	}
	if execs, _, err := c.Executions(ctxT(t), sentinel.ExecutionFilter{Uncertain: true}); err != nil || len(execs) != 0 {
		t.Fatalf("uncertain keys left for an operator: %+v %v", execs, err)
	}
	// The repeat: in progress while the attempt's lease lasts, then run
	// again (nothing committed).
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := do(t, srv, "POST", "/seats", "seat-1", "x")
		if r.status == http.StatusCreated {
			break
		}
		if r.status != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("repeat: %d %s after %d runs, want 201 from a second run", r.status, r.body, runs.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}
}
