package sentineltest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// connect opens a connection to url, closed when t ends.
func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// ownerBackend returns the backend holding owner id's lock, 0 when none.
func ownerBackend(t *testing.T, conn *pgx.Conn, id int32) int32 {
	t.Helper()
	var pid int32
	err := conn.QueryRow(ctxT(t), `SELECT coalesce(max(pid), 0) FROM pg_catalog.pg_locks
		WHERE locktype = 'advisory' AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 2 AND granted`,
		int64(ownerLockClass), int64(id)).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// Issue 26.5: the connection holding an owner's lock is terminated (as
// pg_terminate_backend, a failover or idle_session_timeout would); a sweep
// by another binary, with every schema old enough, keeps the live owner's
// schema, and the owner takes its lock again.
func TestSweepKeepsALiveOwnerWhoseLockConnectionDropped(t *testing.T) {
	url := DatabaseURL(t)
	ctx := ctxT(t)
	conn := connect(t, url)

	o, err := newOwner(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	schema := o.schemaName("sentineltest_")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()) //nolint:errcheck

	pid := ownerBackend(t, conn, o.id)
	if pid == 0 {
		t.Fatal("the owner holds no lock")
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ownerBackend(t, conn, o.id) == pid; {
		if time.Now().After(deadline) {
			t.Fatal("the terminated backend still holds the owner's lock")
		}
		time.Sleep(10 * time.Millisecond)
	}

	dropped, err := sweepStale(ctx, conn, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !schemaExists(t, schema) {
		t.Fatalf("a sweep dropped %s of a live owner whose lock connection was terminated (dropped %v)", schema, dropped)
	}
	// The owner takes its lock again, on a new connection.
	for deadline := time.Now().Add(30 * time.Second); ; {
		o.keepOnce(ctx)
		if p := ownerBackend(t, conn, o.id); p != 0 && p != pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner did not take its lock again")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An owner that closed (its binary ended) or was killed loses its schemas
// to a sweep: at once when it closed, once it has been silent for
// ownerSilence when it was killed.
func TestSweepDropsGoneOwners(t *testing.T) {
	url := DatabaseURL(t)
	ctx := ctxT(t)
	conn := connect(t, url)
	mk := func() (*owner, string) {
		o, err := newOwner(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		s := o.schemaName("sentineltest_")
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()) }) //nolint:errcheck
		return o, s
	}
	closed, closedSchema := mk()
	closed.close()
	killed, killedSchema := mk()
	killed.abandon() // as SIGKILL: its connection ends, its last beat stays

	if _, err := sweepStale(ctx, conn, -1, 0); err != nil {
		t.Fatal(err)
	}
	if schemaExists(t, closedSchema) {
		t.Fatalf("%s of a closed owner survived a sweep", closedSchema)
	}
	if !schemaExists(t, killedSchema) {
		t.Fatalf("%s of an owner that beat just now was dropped", killedSchema)
	}
	saved := ownerSilence
	ownerSilence = 0
	defer func() { ownerSilence = saved }()
	if _, err := sweepStale(ctx, conn, -1, 0); err != nil {
		t.Fatal(err)
	}
	if schemaExists(t, killedSchema) {
		t.Fatalf("%s of a killed owner, silent past ownerSilence, survived a sweep", killedSchema)
	}
}
