package sentineltest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Stale schemas. A test binary killed before its cleanups ran (SIGKILL, a
// test timeout's panic, an OOM kill) leaves its sentineltest_* schemas in
// the database. Every schema's name carries its owner (a random id) and its
// creation time on the database clock:
//
//	sentineltest_<owner, 8 hex>_<unix seconds>_<random>
//	sentineltest_shared_<owner, 8 hex>_<unix seconds>_<random>
//
// An owner proves it is alive two ways, so that losing one connection does
// not make it look gone:
//
//   - it holds a session advisory lock (ownerLockClass, owner) on a
//     connection of its own, for as long as it uses the database: the lock
//     is free the moment the process dies;
//   - it beats every ownerBeat: a row of sentineltest_owners.owners holds
//     the database clock of its last beat. The beat runs on the lock's
//     connection; when that connection has dropped (pg_terminate_backend, a
//     failover, idle_session_timeout), the owner connects again, takes its
//     lock again and beats.
//
// A later run drops a schema only when its owner is gone by both: its lock
// can be taken (in the dropping transaction, so two sweepers cannot race
// and the owner cannot take it back meanwhile) and its last beat, read in
// that transaction with its row locked, is older than ownerSilence or
// absent; and only when the schema is older than staleAfter (database
// clock). An owner that closes deletes its row. Schemas named otherwise
// (older versions) are left alone: their owner cannot be known.

// ownerLockClass is the first key of the owners' advisory locks ("sent").
// Owner ids are 1 to 2^31-1; (ownerLockClass, 0) serializes the creation of
// the owners table.
const ownerLockClass = 0x73656e74

// staleAfter is how old a schema of a dead owner must be before a sweep
// drops it.
var staleAfter = 10 * time.Minute

// ownerBeat is how often an owner beats (and checks its lock's
// connection); ownerSilence is how long an owner may go without a beat
// before a sweep may take it for gone (when its lock is free too).
var (
	ownerBeat    = 10 * time.Second
	ownerSilence = 2 * time.Minute
)

// ownersTable holds the owners' beats, in a schema a sweep never drops (its
// name does not match schemaNameRE).
const ownersTable = `"sentineltest_owners"."owners"`

var schemaNameRE = regexp.MustCompile(`^sentineltest_(?:shared_)?([0-9a-f]{8})_([0-9]{1,19})_[0-9a-f]+$`)

// owner is this process's identity in the database: the connection holding
// its advisory lock, and the database clock at the time it was taken.
type owner struct {
	id      int32
	url     string
	dbStart time.Time // the database clock when the lock was first taken
	start   time.Time // the local clock then (monotonic)

	mu     sync.Mutex // guards conn and locked
	conn   *pgx.Conn  // the owner's connection; nil after it dropped, until the next beat
	locked bool       // conn holds the owner's lock
	stop   chan struct{}
	done   chan struct{}
}

// newOwner connects to url, takes the owner lock under a fresh random id,
// beats once and starts beating every ownerBeat.
func newOwner(ctx context.Context, url string) (*owner, error) {
	if err := createOwnersTable(ctx, url); err != nil {
		return nil, fmt.Errorf("owner table: %w", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("owner connection: %w", err)
	}
	for range 8 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id := int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
		if id == 0 {
			continue
		}
		var got bool
		var now time.Time
		err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1::int4, $2::int4), pg_catalog.now()`,
			int32(ownerLockClass), id).Scan(&got, &now)
		if err != nil {
			_ = conn.Close(context.Background())
			return nil, fmt.Errorf("owner lock: %w", err)
		}
		if !got {
			continue
		}
		o := &owner{id: id, url: url, conn: conn, locked: true, dbStart: now, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
		if err := beat(ctx, conn, id); err != nil {
			_ = conn.Close(context.Background())
			return nil, fmt.Errorf("owner beat: %w", err)
		}
		go o.keep()
		return o, nil
	}
	_ = conn.Close(context.Background())
	return nil, fmt.Errorf("owner lock: no free id after 8 tries")
}

// createOwnersTable creates the owners' table when missing, one creator at
// a time.
func createOwnersTable(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, ownersTable).Scan(&exists); err != nil || exists {
		return err
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_catalog.pg_advisory_xact_lock($1::int4, 0)`, int32(ownerLockClass)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS "sentineltest_owners";
			CREATE TABLE IF NOT EXISTS `+ownersTable+` (id int4 PRIMARY KEY, beat timestamptz NOT NULL)`)
		return err
	})
}

// beat records that owner id is alive now (database clock).
func beat(ctx context.Context, conn *pgx.Conn, id int32) error {
	_, err := conn.Exec(ctx, `INSERT INTO `+ownersTable+` AS o (id, beat) VALUES ($1, pg_catalog.now())
		ON CONFLICT (id) DO UPDATE SET beat = pg_catalog.now()`, id)
	return err
}

// keep beats every ownerBeat until close.
func (o *owner) keep() {
	defer close(o.done)
	t := time.NewTicker(ownerBeat)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ownerBeat)
		o.keepOnce(ctx)
		cancel()
	}
}

// keepOnce beats. When the owner's connection has dropped, it connects
// again first; when the new connection does not hold the lock yet, it
// tries to take it (a sweeper checking this owner holds it for a moment:
// the beat keeps the owner alive meanwhile, and the next one tries again).
func (o *owner) keepOnce(ctx context.Context) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil && beat(ctx, o.conn, o.id) == nil && o.locked {
		return
	}
	if o.conn != nil && (o.conn.IsClosed() || o.conn.Ping(ctx) != nil) {
		_ = o.conn.Close(context.Background())
		o.conn, o.locked = nil, false
	}
	if o.conn == nil {
		conn, err := pgx.Connect(ctx, o.url)
		if err != nil {
			logf("sentineltest: owner %08x: connect again: %v", o.id, err)
			return
		}
		o.conn = conn
	}
	if !o.locked {
		err := o.conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1::int4, $2::int4)`,
			int32(ownerLockClass), o.id).Scan(&o.locked)
		if err != nil {
			logf("sentineltest: owner %08x: take the lock again: %v", o.id, err)
		}
	}
	if err := beat(ctx, o.conn, o.id); err != nil {
		logf("sentineltest: owner %08x: beat: %v", o.id, err)
	}
}

// schemaName returns a new schema name owned by o, prefix "sentineltest_"
// or "sentineltest_shared_".
func (o *owner) schemaName(prefix string) string {
	created := o.dbStart.Add(time.Since(o.start)).Unix()
	return fmt.Sprintf("%s%08x_%d_%s", prefix, o.id, created, randomHex())
}

// close stops beating, deletes the owner's row and ends its lock: a sweep
// may then drop what the owner left.
func (o *owner) close() {
	if o == nil {
		return
	}
	o.halt()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, _ = o.conn.Exec(ctx, `DELETE FROM `+ownersTable+` WHERE id = $1`, o.id)
		cancel()
		_ = o.conn.Close(context.Background())
		o.conn, o.locked = nil, false
	}
}

// abandon ends the owner as a killed process does: no more beats, the lock
// ends with its connection, the last beat stays. Tests only.
func (o *owner) abandon() {
	o.halt()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conn != nil {
		_ = o.conn.Close(context.Background())
		o.conn, o.locked = nil, false
	}
}

// halt stops the beats and waits for the keeper to return.
func (o *owner) halt() {
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
}

// sweepStale drops the sentineltest schemas whose owner is gone and that
// are older than minAge on the database clock, except those of skip (the
// caller's own id). It returns the names dropped.
func sweepStale(ctx context.Context, conn *pgx.Conn, skip int32, minAge time.Duration) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT nspname, extract(epoch FROM pg_catalog.now())::bigint
		FROM pg_catalog.pg_namespace WHERE nspname LIKE 'sentineltest\_%'`)
	if err != nil {
		return nil, err
	}
	type cand struct {
		name  string
		owner int32
	}
	var cands []cand
	for rows.Next() {
		var name string
		var now int64
		if err := rows.Scan(&name, &now); err != nil {
			rows.Close()
			return nil, err
		}
		m := schemaNameRE.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		id, err1 := strconv.ParseUint(m[1], 16, 32)
		created, err2 := strconv.ParseInt(m[2], 10, 64)
		if err1 != nil || err2 != nil || int32(id) == skip || id > 0x7fffffff {
			continue
		}
		if time.Duration(now-created)*time.Second < minAge {
			continue
		}
		cands = append(cands, cand{name, int32(id)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var dropped []string
	for _, c := range cands {
		var gone bool
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1::int4, $2::int4)`,
				int32(ownerLockClass), c.owner).Scan(&gone); err != nil || !gone {
				return err // a live owner holds it: keep the schema
			}
			// The lock is free: the owner died, or only its lock's
			// connection did. Its beat tells (its row locked, so a beat
			// waits for this decision).
			if err := tx.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM `+ownersTable+`
				WHERE id = $1 AND beat > pg_catalog.now() - $2::bigint * interval '1 microsecond' FOR UPDATE)`,
				c.owner, ownerSilence.Microseconds()).Scan(&gone); err != nil || !gone {
				return err // beat lately: alive, its lock being taken again
			}
			_, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{c.name}.Sanitize()+" CASCADE")
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("drop stale schema %s: %w", c.name, err)
		}
		if gone {
			dropped = append(dropped, c.name)
		}
	}
	// Rows of owners silent that long are as good as absent.
	if _, err := conn.Exec(ctx, `DELETE FROM `+ownersTable+` WHERE beat < pg_catalog.now() - $1::bigint * interval '1 microsecond'`,
		(ownerSilence + staleAfter).Microseconds()); err != nil {
		return dropped, fmt.Errorf("delete silent owners: %w", err)
	}
	return dropped, nil
}
