package sentineltest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
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
// and the owner holds a session advisory lock (ownerLockClass, owner) on a
// connection of its own for as long as it uses the database. A later run
// drops a schema only when its owner's lock can be taken (no live session
// holds it: the owner is gone) and the schema is older than staleAfter (on
// the database clock), taking the lock in the dropping transaction so two
// sweepers cannot race. Schemas named otherwise (older versions) are left
// alone: their owner cannot be known.

// ownerLockClass is the first key of the owners' advisory locks ("sent").
const ownerLockClass = 0x73656e74

// staleAfter is how old a schema of a dead owner must be before a sweep
// drops it: a margin for an owner whose lock connection broke while the
// owner lives on.
var staleAfter = 10 * time.Minute

var schemaNameRE = regexp.MustCompile(`^sentineltest_(?:shared_)?([0-9a-f]{8})_([0-9]{1,19})_[0-9a-f]+$`)

// owner is this process's identity in the database: the connection holding
// its advisory lock, and the database clock at the time it was taken.
type owner struct {
	id      int32
	conn    *pgx.Conn
	dbStart time.Time // the database clock when the lock was taken
	start   time.Time // the local clock then (monotonic)
}

// newOwner connects to url and takes the owner lock under a fresh random id.
func newOwner(ctx context.Context, url string) (*owner, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("owner connection: %w", err)
	}
	for range 8 {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id := int32(binary.BigEndian.Uint32(b[:]) & 0x7fffffff)
		var got bool
		var now time.Time
		err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_lock($1::int4, $2::int4), pg_catalog.now()`,
			int32(ownerLockClass), id).Scan(&got, &now)
		if err != nil {
			_ = conn.Close(context.Background())
			return nil, fmt.Errorf("owner lock: %w", err)
		}
		if got {
			return &owner{id: id, conn: conn, dbStart: now, start: time.Now()}, nil
		}
	}
	_ = conn.Close(context.Background())
	return nil, fmt.Errorf("owner lock: no free id after 8 tries")
}

// schemaName returns a new schema name owned by o, prefix "sentineltest_"
// or "sentineltest_shared_".
func (o *owner) schemaName(prefix string) string {
	created := o.dbStart.Add(time.Since(o.start)).Unix()
	return fmt.Sprintf("%s%08x_%d_%s", prefix, o.id, created, randomHex())
}

func (o *owner) close() {
	if o != nil && o.conn != nil {
		_ = o.conn.Close(context.Background())
	}
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
		var free bool
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, `SELECT pg_catalog.pg_try_advisory_xact_lock($1::int4, $2::int4)`,
				int32(ownerLockClass), c.owner).Scan(&free); err != nil || !free {
				return err // a live owner holds it: keep the schema
			}
			_, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{c.name}.Sanitize()+" CASCADE")
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("drop stale schema %s: %w", c.name, err)
		}
		if free {
			dropped = append(dropped, c.name)
		}
	}
	return dropped, nil
}
