package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/lib/pq" // pglock's driver

	"github.com/sentinel-coordination/sentinel"
)

// impl is one implementation of one operation, ready to be measured with a
// fixed number of workers. op runs one operation as worker w; workers never
// share per-worker state.
type impl struct {
	name  string
	op    func(ctx context.Context, w int) error
	stmts func() int64 // statements sent so far; nil when not counted
	tr    *tracer      // nil when not traced
	close func()
}

// receipt is the result every Once in the benchmark returns.
type receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func charge(context.Context) (receipt, error) { return receipt{ID: "pay_1", Amount: 9900}, nil }

// keyGen makes unique keys per worker, in random order across the key space
// (like real idempotency keys), without a shared lock.
type keyGen struct {
	prefix string
	rngs   []*rand.Rand
}

func newKeyGen(workers int) *keyGen {
	g := &keyGen{prefix: uuid.NewString()[:8] + "-"}
	for range workers {
		g.rngs = append(g.rngs, rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	}
	return g
}

// next puts the random part first, so keys spread over the whole primary
// key index instead of piling up behind a common prefix.
func (g *keyGen) next(w int) string {
	return strconv.FormatUint(g.rngs[w].Uint64(), 16) + "-" + g.prefix
}

// --- the floor: the library's statements, by hand -------------------------

// floor issues the library's own statements with pgx, with nothing around
// them: no option handling, no lease bookkeeping, no heartbeats.
type floor struct {
	pool                                  *pgxpool.Pool
	read, claim, finish, acquire, release string
	owner, host                           string
	pid                                   int
}

func newFloor(pool *pgxpool.Pool, schema string) *floor {
	q := pgx.Identifier{schema}.Sanitize()
	// The sequence as the library names it: an escaped E'' regclass literal.
	seq := "E'" + strings.ReplaceAll(strings.ReplaceAll(q+".fencing_token", `\`, `\\`), `'`, `''`) + "'::pg_catalog.regclass"
	r := strings.NewReplacer("{{schema}}", q, "{{cols}}", floorExecCols, "{{seq}}", seq, "{{gcols}}", floorExecColsOf,
		"{{ccols}}", strings.ReplaceAll(floorExecColsOf, "g.", "c."))
	host, _ := os.Hostname()
	return &floor{
		pool:    pool,
		read:    r.Replace(floorSQLReadExecution),
		claim:   r.Replace(floorSQLClaim),
		finish:  r.Replace(floorSQLFinish),
		acquire: r.Replace(floorSQLAcquire),
		release: r.Replace(floorSQLRelease),
		owner:   "floor-" + uuid.NewString(),
		host:    host,
		pid:     os.Getpid(),
	}
}

// execRow is what the library scans from an executions row.
type execRow struct {
	ns, key, state, owner, host string
	pid                         int
	token                       int64
	created, updated            time.Time
	lease, hard, done           *time.Time
	result                      []byte
	resErr, finalErr            *string
	byOperator, alive           bool
	remaining                   time.Duration
	attempt, maxAttempts        int
}

func (e *execRow) dest(prefix ...any) []any {
	return append(prefix, &e.ns, &e.key, &e.state, &e.owner, &e.host, &e.pid, &e.token, &e.created, &e.updated,
		&e.lease, &e.hard, &e.done, &e.result, &e.resErr, &e.finalErr, &e.byOperator, &e.alive, &e.remaining, &e.attempt, &e.maxAttempts)
}

// claimRow is what the library scans from its claim statement: the
// claimed row's fields packed in an array (NULL when nothing was claimed)
// and the key's row as read (all NULL when the key was absent).
type claimRow struct {
	packed                      []int64
	ns, key, state, owner, host *string
	pid, attempt, maxAttempts   *int
	token                       *int64
	created, updated            *time.Time
	lease, hard, done           *time.Time
	result                      []byte
	resErr, finalErr            *string
	byOperator                  *bool
	alive                       bool
	remaining                   time.Duration
}

func (e *claimRow) dest() []any {
	return []any{&e.packed, &e.ns, &e.key, &e.state, &e.owner, &e.host, &e.pid, &e.token, &e.created, &e.updated,
		&e.lease, &e.hard, &e.done, &e.result, &e.resErr, &e.finalErr, &e.byOperator, &e.alive, &e.remaining, &e.attempt, &e.maxAttempts}
}

const (
	namespace = "default"
	ttl       = 3 * time.Second // sentinel's DefaultTTL
)

// onceFresh: claim (the key is absent), run (nothing), complete.
func (f *floor) onceFresh(ctx context.Context, key string) error {
	var row claimRow
	if err := f.pool.QueryRow(ctx, f.claim, namespace, key, "executing", f.owner, f.host, f.pid,
		ttl.Microseconds(), ttl.Microseconds(), nil, 1, int64(0)).Scan(row.dest()...); err != nil {
		return fmt.Errorf("floor claim: %w", err)
	}
	if len(row.packed) != 9 {
		return fmt.Errorf("floor claim: key %q not claimed", key)
	}
	v, _ := charge(ctx)
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var (
		n      int64
		waited bool // nobody waits for the floor's keys: no wake-up to send
	)
	if err := f.pool.QueryRow(ctx, f.finish, namespace, key, f.owner, row.packed[0], "completed", data, nil,
		[]string{"executing"}, true, "completed", nil, nil).Scan(&n, &waited); err != nil || n != 1 {
		return fmt.Errorf("floor complete: n=%d err=%v", n, err)
	}
	return nil
}

// replay: the primary-key read, result decoded.
func (f *floor) replay(ctx context.Context, key string) error {
	var row execRow
	if err := f.pool.QueryRow(ctx, f.read, namespace, key).Scan(row.dest()...); err != nil {
		return fmt.Errorf("floor replay read: %w", err)
	}
	var v receipt
	if row.state != "completed" {
		return fmt.Errorf("floor replay: state %s", row.state)
	}
	return json.Unmarshal(row.result, &v)
}

// lease: the acquire statement, then the release statement (it notifies
// only when a caller waits for the key: here, never).
func (f *floor) lease(ctx context.Context, key string) error {
	var (
		acquired    bool
		owner, host string
		pid         int
		token       int64
		at, exp     time.Time
		hard        *time.Time
		remaining   time.Duration
	)
	if err := f.pool.QueryRow(ctx, f.acquire, namespace, key, f.owner, f.host, f.pid, ttl.Microseconds(), int64(0), false, 0).
		Scan(&acquired, &owner, &host, &pid, &token, &at, &exp, &hard, &remaining); err != nil {
		return fmt.Errorf("floor acquire: %w", err)
	}
	if !acquired {
		return fmt.Errorf("floor acquire: %q held by %s", key, owner)
	}
	var n int64
	var wake, channel string // the release's wake-up (none: nobody waits)
	if err := f.pool.QueryRow(ctx, f.release, namespace, key, f.owner, token).Scan(&n, &wake, &channel); err != nil || n != 1 {
		return fmt.Errorf("floor release: n=%d err=%v", n, err)
	}
	return nil
}

// --- implementations per operation ----------------------------------------

// setupFloor returns the floor's implementation of an operation.
func (b *bench) setupFloor(ctx context.Context, opName string, workers int) (*impl, error) {
	tr := &tracer{}
	pool, err := newPool(ctx, b.url, b.maxConns, tr)
	if err != nil {
		return nil, err
	}
	f := newFloor(pool, b.schema)
	im := &impl{stmts: tr.n.Load, tr: tr, close: pool.Close}
	keys := newKeyGen(workers)
	switch opName {
	case opOnceFresh:
		im.name = "floor: claim + complete by hand"
		im.op = func(ctx context.Context, w int) error { return f.onceFresh(ctx, keys.next(w)) }
	case opOnceReplay:
		im.name = "floor: one primary-key SELECT by hand"
		for w := range workers {
			if err := f.onceFresh(ctx, fmt.Sprintf("%sreplay-%d", keys.prefix, w)); err != nil {
				pool.Close()
				return nil, err
			}
		}
		im.op = func(ctx context.Context, w int) error {
			return f.replay(ctx, fmt.Sprintf("%sreplay-%d", keys.prefix, w))
		}
	case opLease:
		im.name = "floor: acquire + release statements by hand"
		im.op = func(ctx context.Context, w int) error { return f.lease(ctx, fmt.Sprintf("%slease-%d", keys.prefix, w)) }
	default:
		pool.Close()
		return nil, fmt.Errorf("floor: unknown operation %q", opName)
	}
	return im, nil
}

// newClient returns a Sentinel client in schema on a traced pool of its own.
func (b *bench) newClient(ctx context.Context, schema string, tr *tracer, cfg sentinel.Config) (*sentinel.Client, func(), error) {
	pool, err := newPool(ctx, b.url, b.maxConns, tr)
	if err != nil {
		return nil, nil, err
	}
	cfg.Schema = schema
	c, err := sentinel.New(pool, &cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); pool.Close() }, nil
}

func (b *bench) setupSentinel(ctx context.Context, opName string, workers int) (*impl, error) {
	tr := &tracer{}
	c, closeFn, err := b.newClient(ctx, b.schema, tr, sentinel.Config{CoalesceInFlight: b.opts.coInFlight})
	if err != nil {
		return nil, err
	}
	im := &impl{stmts: tr.n.Load, tr: tr, close: closeFn}
	keys := newKeyGen(workers)
	switch opName {
	case opOnceFresh:
		im.name = "sentinel.Once"
		im.op = func(ctx context.Context, w int) error { return onceFresh(ctx, c, keys.next(w)) }
	case opOnceReplay:
		im.name = "sentinel.Once (replay, key seen completed)"
		for w := range workers {
			if err := onceFresh(ctx, c, fmt.Sprintf("%sreplay-%d", keys.prefix, w)); err != nil {
				closeFn()
				return nil, err
			}
		}
		im.op = func(ctx context.Context, w int) error {
			res, err := sentinel.Once(ctx, c, fmt.Sprintf("%sreplay-%d", keys.prefix, w), charge)
			if err == nil && (!res.Cached || res.Value.Amount != 9900) {
				err = fmt.Errorf("replay not cached: %+v", res)
			}
			return err
		}
	case opLease:
		im.name = "sentinel Lease + Release"
		im.op = func(ctx context.Context, w int) error {
			l, err := c.Lease(ctx, fmt.Sprintf("%slease-%d", keys.prefix, w))
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}
	default:
		closeFn()
		return nil, fmt.Errorf("sentinel: unknown operation %q", opName)
	}
	return im, nil
}

// replayColdKeys is how many keys per worker the unremembered replay
// cycles through: more than a client remembers as completed (4,096, the
// library's maxReplayHints), so that, replayed in order, every key was
// forgotten before its turn comes again and each replay is the claim
// statement, as a client's first replay of a key completed elsewhere is.
const replayColdKeys = 5000

// setupSentinelReplayCold replays keys another client completed, in an
// order that keeps the measuring client from remembering any of them (see
// replayColdKeys): the replay of a key a process never saw completed.
func (b *bench) setupSentinelReplayCold(ctx context.Context, opName string, workers int) (*impl, error) {
	if opName != opOnceReplay {
		return nil, fmt.Errorf("sentinel (unremembered replay): unknown operation %q", opName)
	}
	other, closeOther, err := b.newClient(ctx, b.schema, &tracer{}, sentinel.Config{})
	if err != nil {
		return nil, err
	}
	defer closeOther()
	keys := newKeyGen(workers)
	list := make([][]string, workers)
	for w := range workers {
		for range replayColdKeys {
			list[w] = append(list[w], keys.next(w))
		}
	}
	// Completed by the other client, 16 at a time.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	next := make(chan string)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				if err := onceFresh(ctx, other, k); err != nil {
					mu.Lock()
					ferr = errors.Join(ferr, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, l := range list {
		for _, k := range l {
			next <- k
		}
	}
	close(next)
	wg.Wait()
	if ferr != nil {
		return nil, ferr
	}
	tr := &tracer{}
	c, closeFn, err := b.newClient(ctx, b.schema, tr, sentinel.Config{CoalesceInFlight: b.opts.coInFlight})
	if err != nil {
		return nil, err
	}
	at := make([]int, workers)
	return &impl{name: nameSentinelReplayCold, stmts: tr.n.Load, tr: tr, close: closeFn,
		op: func(ctx context.Context, w int) error {
			k := list[w][at[w]%replayColdKeys]
			at[w]++
			res, err := sentinel.Once(ctx, c, k, charge)
			if err == nil && (!res.Cached || res.Value.Amount != 9900) {
				err = fmt.Errorf("replay not cached: %+v", res)
			}
			return err
		}}, nil
}

func onceFresh(ctx context.Context, c *sentinel.Client, key string) error {
	res, err := sentinel.Once(ctx, c, key, charge)
	if err == nil && res.Cached {
		err = fmt.Errorf("fresh key %q replayed", key)
	}
	return err
}

// openPglockDB opens the database/sql pool pglock needs (lib/pq).
func (b *bench) openPglockDB() (*sql.DB, error) {
	db, err := sql.Open("postgres", b.url)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(b.maxConns)
	db.SetMaxIdleConns(b.maxConns)
	return db, nil
}

// newPglock returns a pglock client with the benchmark's settings.
func (b *bench) newPglock(db *sql.DB) (*pglock.Client, error) {
	return pglock.New(db,
		pglock.WithLeaseDuration(b.opts.pglockLease),
		pglock.WithHeartbeatFrequency(b.opts.pglockHeartbeat),
		pglock.WithCustomTable(b.schema+".pglock"),
		pglock.WithOwner("bench-"+uuid.NewString()[:8]))
}

func (b *bench) setupPglock(ctx context.Context, opName string, workers int) (*impl, error) {
	if opName != opLease {
		return nil, fmt.Errorf("pglock: unknown operation %q", opName)
	}
	db, err := b.openPglockDB()
	if err != nil {
		return nil, err
	}
	c, err := b.newPglock(db)
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := c.TryCreateTable(); err != nil {
		db.Close()
		return nil, err
	}
	keys := newKeyGen(workers)
	return &impl{
		name: fmt.Sprintf("cirello.io/pglock %s (lease %s, heartbeat %s)", pglockVersion, b.opts.pglockLease, b.opts.pglockHeartbeat),
		op: func(ctx context.Context, w int) error {
			l, err := c.AcquireContext(ctx, fmt.Sprintf("%slease-%d", keys.prefix, w))
			if err != nil {
				return err
			}
			return c.ReleaseContext(ctx, l)
		},
		close: func() { db.Close() },
	}, nil
}

// advisoryKey maps a (cell, worker) to an advisory lock id.
func advisoryKey(base int64, w int) int64 { return base<<16 | int64(w) }

func (b *bench) setupAdvisory(ctx context.Context, opName string, workers int) (*impl, error) {
	if opName != opLease {
		return nil, fmt.Errorf("advisory: unknown operation %q", opName)
	}
	tr := &tracer{}
	conns := make([]*pgx.Conn, workers)
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				_ = c.Close(context.Background())
			}
		}
	}
	for w := range conns {
		c, err := newConn(ctx, b.url, tr)
		if err != nil {
			closeAll()
			return nil, err
		}
		conns[w] = c
	}
	base := rand.Int64N(1 << 40)
	return &impl{
		name:  "pg_advisory_lock + unlock, dedicated connection",
		stmts: tr.n.Load,
		tr:    tr,
		op: func(ctx context.Context, w int) error {
			k := advisoryKey(base, w)
			if _, err := conns[w].Exec(ctx, "SELECT pg_advisory_lock($1)", k); err != nil {
				return err
			}
			var ok bool
			if err := conns[w].QueryRow(ctx, "SELECT pg_advisory_unlock($1)", k).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("advisory unlock: ok=%v err=%v", ok, err)
			}
			return nil
		},
		close: closeAll,
	}, nil
}
