package sentinel

// This file: Client.Follow and FollowHead: the event stream in commit order (a cursor of the last ID and the IDs still in flight below it).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel/internal/names"
)

// FollowFilter selects the events Client.Follow delivers. The zero value
// follows every event of the client's namespace from the moment Follow
// starts.
type FollowFilter struct {
	// Namespace to follow. Default: the client's namespace.
	Namespace string

	// AllNamespaces follows every namespace. It cannot be combined with
	// Namespace.
	AllNamespaces bool

	// Keys keeps only events of these keys. Empty: every key.
	Keys []string

	// Types keeps only events of these types (Event.Type: "claimed",
	// "started", "completed", "completion_refused", "reconciling", ...).
	// Empty: every type.
	Types []string

	// After delivers events whose ID is greater than After, committed
	// before Follow started or later, and the events with a lower ID (among
	// the 1024 IDs up to After) whose transactions are still under way
	// when Follow starts. Zero: only events committed after Follow started
	// (see Follow for the exact rule).
	//
	// An ID alone is not an exact resume position: IDs are drawn before
	// commit, so an event with an ID below the last one a previous Follow
	// delivered may commit after that Follow stopped and before this one
	// started; After cannot tell it from one already delivered, and it is
	// missed. To resume without a gap, pass Event.Cursor as Cursor instead.
	After int64

	// Cursor resumes exactly where a previous Follow stopped: pass the
	// Event.Cursor of the last event it delivered. Every matching event that
	// Follow did not deliver up to that event is delivered (once), however
	// late its transaction commits, and none that it delivered is delivered
	// again: a resumed Follow is as complete as a continuous one. A cursor
	// is opaque text (digits, ':', ',' and '-'); an event ID written as a
	// decimal number is a valid cursor, with the meaning of After. It
	// cannot be combined with After. Empty: no cursor.
	//
	// A cursor names at most MaxFollowCursorRanges ranges of IDs not seen,
	// covering at most MaxFollowCursorIDs IDs in all, in at most 64 KiB of
	// text; a longer one is refused with ErrInvalid (a follower writes one
	// only when that many event IDs were drawn by transactions in flight at
	// once). Whatever a cursor asks for, Follow reads it in bounded steps
	// (see Follow).
	Cursor string

	// OnStart, when set, is called once, on Follow's goroutine, when Follow
	// holds its starting position: every matching event committed after
	// OnStart was called is delivered. Start the work a follower must not
	// miss from it (or after it signals), instead of sleeping.
	OnStart func()

	// OnRead, when set, is called on Follow's goroutine after every read
	// of the events that succeeded (the one that finds the starting
	// position included), before the events it found are delivered. A
	// lost connection is retried quietly, backing off up to 5s between
	// attempts: the first OnRead after it says that Follow reads again,
	// and not merely that the database answers someone else. A follower
	// that tells a person whether it is up to date (the console's live
	// view) waits for it. It must return quickly: while it runs, no event
	// is read.
	OnRead func()

	// PollInterval is the longest time between two reads of the event
	// table while nothing happens. Right after activity Follow reads again
	// after PollInterval/4 (at least 5ms), doubling the pause on every
	// quiet read. Default 200ms; at least 10ms.
	PollInterval time.Duration
}

// Follow limits.
const (
	defaultFollowPoll = 200 * time.Millisecond
	minFollowPoll     = 10 * time.Millisecond
	// followBatch bounds both parts of a read: the events above the
	// position, and the events found in the gaps (IDs below it not seen
	// yet; the lowest ones first). No read returns more than 2*followBatch
	// events, however many gaps a cursor names and however wide they are.
	followBatch    = 500
	followGapProbe = MaxFollowCursorRanges  // gaps probed per read (the lowest ones)
	followLookback = 1024                   // ids behind the head checked for in-flight events at start
	followGapGrace = 100 * time.Millisecond // see Follow's comment on gaps
)

// Bounds of a follow cursor (FollowFilter.Cursor): how many ranges of IDs
// not seen one may name, and how many IDs those may cover in all. A
// follower writes a cursor past them only when that many event IDs were
// drawn by transactions in flight at once (each open transaction that
// writes events holds one range or a few); Follow refuses one with
// ErrInvalid.
const (
	MaxFollowCursorRanges = 1024
	MaxFollowCursorIDs    = 1 << 20
)

// Follow calls fn with every event that matches f, as the events are
// committed, until ctx ends (it then returns ctx.Err()), fn returns an
// error (Follow returns it unchanged), the client is closed (ErrClosed) or
// the database fails with an error other than a lost connection (lost
// connections are retried, the position kept). fn runs on Follow's
// goroutine, one event at a time; while it runs, no event is read.
//
// Every matching event is delivered exactly once per Follow call. A key's
// transitions (claimed, started, completed, reconciling, ...) are delivered
// in the order they happened (ID order): Sentinel writes them under the
// key's row lock, so they commit in ID order. An event written beside a
// transition rather than by it (completion_refused, recorded rejections)
// and any event of another key may arrive after one with a higher ID, when
// its transaction committed later (a long OnceTx, for example): order by
// Event.ID if you need the global order.
//
// Each read is one bounded statement: at most 500 events above the
// position, and from the ranges of IDs below it not seen yet (gaps) at
// most 500 events, or one per gap when there are more (at most 1024 gaps
// probed per read, in turn); what a read leaves is read by the next one,
// at once, and events above the position are delivered only from a read
// that probed every gap in full, which keeps a key's events in ID order. A
// Follow resumed from any cursor, even one naming every ID of the table as
// not seen, therefore holds at most one read's events in memory.
//
// With f.After zero, Follow delivers the events committed after it started,
// including those of transactions already under way; an event whose ID was
// drawn more than 1024 events before Follow started but that commits after
// it is missed. To resume where an earlier Follow stopped, pass the Cursor
// of the last event it delivered as f.Cursor: the resumed Follow delivers
// exactly what a continuous one would have (see FollowFilter.Cursor).
//
// Follow reads the event table by ID on the client's pool (one short
// statement per read, no connection held between reads). It adds nothing
// to the statements Once and the reconciliation steps send: no NOTIFY,
// which would serialise every committing transaction of the database.
// A nil ctx is refused (ErrInvalid).
func (c *Client) Follow(ctx context.Context, f FollowFilter, fn func(Event) error) error {
	if err := checkCtx("Client.Follow", ctx); err != nil {
		return err
	}
	if err := c.checkOpen(); err != nil {
		return err
	}
	if fn == nil {
		return invalid("fn", "must not be nil")
	}
	fw, err := c.newFollower(f)
	if err != nil {
		return err
	}
	return fw.run(ctx, fn)
}

// FollowHead returns the position of the event history now, as a
// FollowFilter.Cursor: a Follow started later from it delivers every event
// committed after this call, those of transactions under way at it
// included (their IDs are the cursor's gaps), so a page read after
// FollowHead and followed from it misses no change made in between. One
// statement, the one Follow starts with. A nil ctx is refused (ErrInvalid).
func (c *Client) FollowHead(ctx context.Context) (string, error) {
	if err := checkCtx("Client.FollowHead", ctx); err != nil {
		return "", err
	}
	if err := c.checkOpen(); err != nil {
		return "", err
	}
	rows, err := c.pool.Query(ctx, followStartSQL(c.sql.schema+".events"), int64(followLookback))
	if err != nil {
		return "", c.wrapErr("read the events' head", err)
	}
	hi, gaps, err := scanFollowStart(rows, time.Now())
	if err != nil {
		return "", c.wrapErr("read the events' head", err)
	}
	return encodeFollowCursor(hi, gaps), nil
}

// A follower reads the event table by ID. The difficulty is that IDs are
// drawn when a row is inserted but become visible when its transaction
// commits, and transactions commit out of order: a reader that has seen ID
// 11 may see ID 10 later (or never, if its transaction rolled back). So the
// follower keeps, besides its cursor (the highest ID seen), the ranges of
// IDs below the cursor it has not seen ("gaps"), and re-reads them with
// every read until each is settled:
//
//   - Each read is one statement, so one snapshot S: it returns the events
//     above the cursor, the events inside the gaps, and S's xmin and xmax
//     (pg_current_snapshot()). Every transaction with an xid below xmin(S)
//     has ended, committed or not.
//   - The transaction T that drew a gap's ID drew it before the transaction
//     of the higher, visible ID, hence before the read that first saw the
//     gap. T has an xid by the time it inserts, which follows its drawing
//     of the ID within the same statement, microseconds later. A read at
//     least followGapGrace (100ms) after the gap was first seen therefore
//     has T's xid below its xmax; that xmax becomes the gap's horizon.
//   - A read whose xmin is at or above the horizon knows T has ended: if T
//     committed, its event is visible to that very read and was returned
//     with it; if not, the ID will never appear. The gap is dropped.
//
// A gap thus lives as long as the transaction that owns it (a long OnceTx
// keeps its gap open, and its event is delivered when it commits), never
// less, and costs one index range probe per read meanwhile.
type follower struct {
	c         *Client
	f         FollowFilter
	sql       string // the read
	startSQL  string // the first read when f.After is 0
	resumeSQL string // the first read when resuming from an ID alone
	args      []any  // filter arguments, after the four fixed ones
	poll      time.Duration
	fast      time.Duration

	cursor int64
	gaps   []gap         // ordered by lo, disjoint, all below cursor
	resume *followCursor // FollowFilter.Cursor, parsed; nil without one
}

type gap struct {
	lo, hi  int64     // inclusive
	seen    time.Time // when first seen (local monotonic clock)
	horizon uint64    // xmax of a read taken followGapGrace after seen; 0 = not yet
}

func (c *Client) newFollower(f FollowFilter) (*follower, error) {
	if f.AllNamespaces && f.Namespace != "" {
		return nil, invalid("Namespace", "must be empty with AllNamespaces, got %q", f.Namespace)
	}
	ns := f.Namespace
	if ns == "" {
		ns = c.cfg.Namespace
	}
	if !f.AllNamespaces {
		if err := checkNamespace(ns); err != nil {
			return nil, err
		}
	}
	for _, k := range f.Keys {
		if err := checkKey(k); err != nil {
			return nil, err
		}
	}
	for _, t := range f.Types {
		if err := checkName("Types", t, 64); err != nil {
			return nil, err
		}
	}
	if f.After < 0 {
		return nil, invalid("After", "must not be negative, got %d", f.After)
	}
	var resume *followCursor
	if f.Cursor != "" {
		if f.After != 0 {
			return nil, invalid("Cursor", "give Cursor or After, not both")
		}
		var err error
		if resume, err = parseFollowCursor(f.Cursor); err != nil {
			return nil, err
		}
	}
	poll := f.PollInterval
	if poll == 0 {
		poll = defaultFollowPoll
	}
	if poll < minFollowPoll {
		return nil, invalid("PollInterval", "must be at least %s (0 for %s), got %s", minFollowPoll, defaultFollowPoll, f.PollInterval)
	}
	fw := &follower{c: c, f: f, poll: poll, fast: max(poll/4, 5*time.Millisecond), cursor: f.After, resume: resume}

	// The match predicate: only the filters in use are written, values
	// as parameters ($1..$5 are the cursor, the events read above it, the
	// gap bounds and the events read from the gaps).
	var match []string
	n := 5
	arg := func(v any) string {
		fw.args = append(fw.args, v)
		n++
		return "$" + strconv.Itoa(n)
	}
	if !f.AllNamespaces {
		match = append(match, "e.namespace = "+arg(ns))
	}
	if len(f.Keys) > 0 {
		match = append(match, "e.key = ANY("+arg(f.Keys)+"::text[])")
	}
	if len(f.Types) > 0 {
		match = append(match, "e.event = ANY("+arg(f.Types)+"::text[])")
	}
	m := "true"
	if len(match) > 0 {
		m = strings.Join(match, " AND ")
	}
	ev := c.sql.schema + ".events"
	// Rows that do not match come back as bare IDs: the follower must see
	// them to tell them from gaps.
	cols := "e.id, " + m + " AS m, e.namespace, e.key, e.event, e.state, e.token, e.owner, e.at, CASE WHEN " + m + " THEN e.metadata END"
	fw.sql = `SELECT pg_catalog.pg_snapshot_xmin(s.s)::text, pg_catalog.pg_snapshot_xmax(s.s)::text, r.*
FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s
LEFT JOIN LATERAL (
    (SELECT ` + cols + ` FROM ` + ev + ` e WHERE e.id > $1 ORDER BY e.id LIMIT $2)
    UNION ALL
    (SELECT ` + cols + ` FROM ROWS FROM (pg_catalog.unnest($3::bigint[]), pg_catalog.unnest($4::bigint[])) AS g(lo, hi)
        CROSS JOIN LATERAL (SELECT * FROM ` + ev + ` e WHERE e.id BETWEEN g.lo AND g.hi ORDER BY e.id LIMIT $5) e
        ORDER BY e.id LIMIT $5)
) r ON true`
	fw.startSQL = followStartSQL(ev)
	// The same at a given position ($2, from After or a bare-ID cursor).
	fw.resumeSQL = `SELECT pg_catalog.pg_snapshot_xmin(s.s)::text, pg_catalog.pg_snapshot_xmax(s.s)::text, $2::bigint, w.id
FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s
LEFT JOIN LATERAL (SELECT id FROM ` + ev + ` WHERE id > $2::bigint - $1 AND id <= $2::bigint ORDER BY id) w ON true`
	return fw, nil
}

func (fw *follower) run(ctx context.Context, fn func(Event) error) error {
	switch {
	case fw.resume != nil && fw.resume.exact:
		// The previous follower's own position: its cursor and the IDs
		// below it that it had not seen. Each gap's transaction drew its
		// ID before that follower saw the gap, hence before now, so the
		// gaps settle here exactly as they would have there.
		now := time.Now()
		fw.cursor = fw.resume.id
		for _, g := range fw.resume.gaps {
			fw.gaps = append(fw.gaps, gap{lo: g[0], hi: g[1], seen: now})
		}
	case fw.resume != nil || fw.f.After != 0:
		if fw.resume != nil {
			fw.cursor = fw.resume.id
		}
		if err := fw.retry(ctx, func(ctx context.Context) error { return fw.scan(ctx, fw.resumeSQL, fw.cursor) }); err != nil {
			return err
		}
		fw.onRead()
	default:
		if err := fw.retry(ctx, func(ctx context.Context) error { return fw.scan(ctx, fw.startSQL) }); err != nil {
			return err
		}
		fw.onRead()
	}
	followStarted(ctx)
	if fw.f.OnStart != nil {
		fw.f.OnStart()
	}
	wait := fw.fast
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		if err := fw.c.checkOpen(); err != nil {
			return err
		}
		var rd *followRead
		err := fw.retry(ctx, func(ctx context.Context) error {
			var err error
			rd, err = fw.read(ctx)
			return err
		})
		if err != nil {
			return err
		}
		fw.onRead()
		active, full, err := fw.deliver(rd, fn)
		if err != nil {
			return err
		}
		switch {
		case full:
			wait = 0
		case active:
			wait = fw.fast
		default:
			wait = min(2*wait, fw.poll)
		}
	}
}

// onRead calls FollowFilter.OnRead, if set: a read succeeded.
func (fw *follower) onRead() {
	if fw.f.OnRead != nil {
		fw.f.OnRead()
	}
}

// retry runs op until it succeeds, fails with an error that is not a lost
// connection, or ctx ends.
func (fw *follower) retry(ctx context.Context, op func(context.Context) error) error {
	backoff := fw.fast
	for {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !transient(err) {
			return fw.c.wrapErr("follow", err)
		}
		fw.c.cfg.Logger.Warn("sentinel: follow: reading events failed; retrying", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
		if err := fw.c.checkOpen(); err != nil {
			return err
		}
	}
}

// scan places the cursor at the newest visible event (startSQL) or at a
// given ID (resumeSQL, at the ID in pos) and records the invisible IDs among the
// followLookback up to it as gaps: their transactions were under way when
// Follow started, so their events are delivered if they commit.
func (fw *follower) scan(ctx context.Context, sql string, pos ...any) error {
	now := time.Now()
	rows, err := fw.c.pool.Query(ctx, sql, append([]any{int64(followLookback)}, pos...)...)
	if err != nil {
		return err
	}
	hi, gaps, err := scanFollowStart(rows, now)
	if err != nil {
		return err // the position stays: a retry resumes where it was
	}
	fw.cursor, fw.gaps = hi, gaps
	return nil
}

// followStartSQL reads the newest event's ID and the IDs visible among the
// $1 up to it, in the events table ev.
func followStartSQL(ev string) string {
	return `SELECT pg_catalog.pg_snapshot_xmin(s.s)::text, pg_catalog.pg_snapshot_xmax(s.s)::text, h.hi, w.id
FROM (SELECT pg_catalog.pg_current_snapshot() AS s) s
CROSS JOIN (SELECT coalesce(pg_catalog.max(id), 0) AS hi FROM ` + ev + `) h
LEFT JOIN LATERAL (SELECT id FROM ` + ev + ` WHERE id > h.hi - $1 ORDER BY id) w ON true`
}

// scanFollowStart reads followStartSQL's or resumeSQL's rows: the position
// and, as gaps, the IDs among the followLookback up to it that were not
// visible.
func scanFollowStart(rows pgx.Rows, now time.Time) (hi int64, gaps []gap, err error) {
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var xmin, xmax string
		var id *int64
		if err := rows.Scan(&xmin, &xmax, &hi, &id); err != nil {
			return 0, nil, err
		}
		if id != nil {
			ids = append(ids, *id)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	prev := max(hi-followLookback, 0)
	for _, id := range ids {
		if id > prev+1 {
			gaps = append(gaps, gap{lo: prev + 1, hi: id - 1, seen: now})
		}
		prev = id
	}
	return hi, gaps, nil
}

type followRow struct {
	id    int64
	match bool
	ev    Event
}

// followRead is what one read returned: its rows in ID order, its
// snapshot's bounds, and the gaps it probed.
type followRead struct {
	start      time.Time
	rows       []followRow
	xmin, xmax uint64
	probed     int // fw.gaps[:probed] were probed
}

// read does one read, in one snapshot: at most followBatch events above
// the position, and the lowest followBatch events in the lowest
// followGapProbe gaps. The server reads at most followBatch events of
// each gap to find the lowest ones.
func (fw *follower) read(ctx context.Context) (*followRead, error) {
	rd := &followRead{start: time.Now(), probed: min(len(fw.gaps), followGapProbe)}
	above := followBatch
	if rd.probed < len(fw.gaps) {
		above = 0 // delivered only from a read that probes every gap (see deliver)
	}
	los, his := make([]int64, rd.probed), make([]int64, rd.probed)
	for i, g := range fw.gaps[:rd.probed] {
		los[i], his[i] = g.lo, g.hi
	}
	args := append([]any{fw.cursor, above, los, his, followBatch}, fw.args...)
	rows, err := fw.c.pool.Query(ctx, fw.sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var xminS, xmaxS string
	for rows.Next() {
		var id *int64
		var r followRow
		var ns, key, typ, state, owner *string
		var token *int64
		var at *time.Time
		var match *bool
		var meta []byte
		if err := rows.Scan(&xminS, &xmaxS, &id, &match, &ns, &key, &typ, &state, &token, &owner, &at, &meta); err != nil {
			return nil, err
		}
		if id == nil {
			continue // no event at all: the LEFT JOIN's empty row
		}
		r.id = *id
		r.match = match != nil && *match
		if r.match {
			md, err := decodeMetadata(meta)
			if err != nil {
				return nil, err
			}
			r.ev = Event{ID: r.id, Namespace: *ns, Key: *key, Type: *typ, Event: *typ, State: State(*state), Token: *token, Owner: *owner, At: *at, Metadata: md}
		}
		rd.rows = append(rd.rows, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var err1, err2 error
	rd.xmin, err1 = strconv.ParseUint(xminS, 10, 64)
	rd.xmax, err2 = strconv.ParseUint(xmaxS, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("snapshot bounds %q, %q: %w", xminS, xmaxS, err)
	}
	slices.SortFunc(rd.rows, func(a, b followRow) int { return cmp.Compare(a.id, b.id) })
	return rd, nil
}

// deliver applies a read to the follower's position and calls fn with each
// matching event, in ID order, its Cursor the position just after it. It
// reports whether anything new was seen (the next read comes soon), and
// whether a part of the read was cut at its bound (read again at once).
//
// A read that was cut (its gap part returned followBatch events, or it
// did not probe every gap) is taken only up to reach, the highest ID below
// which it saw every visible event: a gap's event may belong to a key
// whose later event has a higher ID, and a key's events are delivered in
// ID order. The rest is read again.
func (fw *follower) deliver(rd *followRead, fn func(Event) error) (active, full bool, err error) {
	reach := int64(math.MaxInt64)
	if rd.probed < len(fw.gaps) {
		reach = fw.gaps[rd.probed].lo - 1
	}
	inGaps, above := 0, 0
	for _, r := range rd.rows {
		if r.id > fw.cursor {
			above++
		} else if inGaps++; inGaps == followBatch {
			reach = min(reach, r.id)
		}
	}
	cut := reach != math.MaxInt64
	prev := fw.cursor
	for _, r := range rd.rows {
		if r.id > reach {
			break // read again
		}
		if r.id <= fw.cursor {
			fw.fill(r.id)
		} else {
			if r.id > prev+1 {
				fw.gaps = append(fw.gaps, gap{lo: prev + 1, hi: r.id - 1, seen: rd.start})
			}
			prev = r.id
		}
		if r.match {
			r.ev.Cursor = encodeFollowCursor(prev, fw.gaps)
			if err := fn(r.ev); err != nil {
				return false, false, err
			}
		}
	}
	fw.cursor = prev

	// Settle gaps against this read's snapshot (see the type's comment),
	// only those below reach: above it, this read may not have returned
	// every visible event of a gap.
	kept := fw.gaps[:0]
	for _, g := range fw.gaps {
		if g.horizon == 0 && rd.start.Sub(g.seen) >= followGapGrace {
			g.horizon = rd.xmax
		}
		if g.horizon != 0 && rd.xmin >= g.horizon && g.hi <= reach {
			continue
		}
		kept = append(kept, g)
	}
	fw.gaps = kept
	return len(rd.rows) > 0, cut || above >= followBatch, nil
}

// gapOf returns the index of the gap of gaps (ordered by lo, disjoint)
// that holds id, or -1.
func gapOf(gaps []gap, id int64) int {
	i := sort.Search(len(gaps), func(i int) bool { return gaps[i].hi >= id })
	if i < len(gaps) && gaps[i].lo <= id {
		return i
	}
	return -1
}

// fill removes id from the gap that holds it.
func (fw *follower) fill(id int64) {
	if i := gapOf(fw.gaps, id); i >= 0 {
		g := fw.gaps[i]
		switch {
		case g.lo == g.hi:
			fw.gaps = slices.Delete(fw.gaps, i, i+1)
		case id == g.lo:
			fw.gaps[i].lo++
		case id == g.hi:
			fw.gaps[i].hi--
		default:
			right := g
			right.lo = id + 1
			fw.gaps[i].hi = id - 1
			fw.gaps = slices.Insert(fw.gaps, i+1, right) // kept in order
		}
	}
}

// followStartedKey carries, in a Follow or FollowQueues ctx, a function
// called once the follower holds its starting position: from then on every
// event committed is delivered. Only the package's tests set it (see
// export_test.go), to start work without sleeping.
type followStartedKey struct{}

func followStarted(ctx context.Context) {
	if f, ok := ctx.Value(followStartedKey{}).(func()); ok {
		f()
	}
}

// A follow cursor is a follower's position, as text: the highest ID it has
// seen, then the ranges of IDs below it that it has not seen (their
// transactions may still commit):
//
//	41872                    nothing missing below 41872
//	41872:41801-41803,41870  41801..41803 and 41870 not seen yet
//
// Everything at or below the ID and outside the ranges was seen (delivered
// when it matched). A bare ID is read with After's meaning: the invisible
// IDs among the 1024 up to it become gaps. For a follower's own bare
// cursor that is exact: it had no open gap, so every such ID belongs to a
// transaction that ended without committing (or was pruned), and it never
// appears; and an ID in flight from before that follower's own start is
// delivered rather than missed. The common cursor is therefore the plain
// event ID, as in SSE's Last-Event-ID.
type followCursor struct {
	id    int64
	gaps  [][2]int64 // inclusive ranges, each below id
	exact bool       // written by a follower (has the ':' part), not a bare ID
}

// maxFollowCursor bounds the cursor text accepted (64 KiB: thousands of
// open transactions' IDs).
const maxFollowCursor = 64 << 10

// encodeFollowCursor writes the cursor of position id with gaps, ordered by
// lo.
func encodeFollowCursor(id int64, gaps []gap) string {
	s := strconv.FormatInt(id, 10)
	if len(gaps) == 0 {
		return s
	}
	b := make([]byte, 0, len(s)+1+len(gaps)*16)
	b = append(b, s...)
	b = append(b, ':')
	for i, g := range gaps {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, g.lo, 10)
		if g.hi != g.lo {
			b = append(b, '-')
			b = strconv.AppendInt(b, g.hi, 10)
		}
	}
	return string(b)
}

func parseFollowCursor(s string) (*followCursor, error) {
	id, gaps, exact, why := names.Cursor(s, maxFollowCursor, MaxFollowCursorRanges, MaxFollowCursorIDs)
	if why != "" {
		return nil, invalid("Cursor", "%s: pass the Cursor of an event a previous Follow delivered (or an event ID), got %.64q", why, s)
	}
	return &followCursor{id: id, gaps: gaps, exact: exact}, nil
}
