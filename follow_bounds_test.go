package sentinel_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// rowsTracer records the rows each follow read returned.
type rowsTracer struct {
	mu   sync.Mutex
	rows []int64
}

type followReadKey struct{}

func (r *rowsTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, followReadKey{}, strings.Contains(d.SQL, "pg_current_snapshot"))
}

func (r *rowsTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if follow, _ := ctx.Value(followReadKey{}).(bool); follow && d.Err == nil {
		r.mu.Lock()
		r.rows = append(r.rows, d.CommandTag.RowsAffected())
		r.mu.Unlock()
	}
}

// Issue 26.4: a forged cursor naming 99,999 IDs of a 100,000-event table
// as not seen is read in bounded steps: no statement returns more than
// two batches of events, the heap stays small, and every event it names
// is delivered once.
func TestFollowForgedCursorReadsInBoundedSteps(t *testing.T) {
	e := newEnv(t)
	const n = 100_000
	_, err := admin.Exec(ctxT(t), "INSERT INTO "+e.table("events")+` (namespace, key, event, state, token, owner, metadata)
		SELECT 'default', 'k' || i, 'claimed', 'claimed', i, 'o', jsonb_build_object('pad', repeat('x', 200)) FROM generate_series(1, $1) i`, n)
	require.NoError(t, err)
	var lo, hi int64
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT min(id), max(id) FROM "+e.table("events")).Scan(&lo, &hi))

	tr := &rowsTracer{}
	c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.ConnConfig.Tracer = tr }), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak uint64
	seen := make(map[int64]bool, n)
	err = c.Follow(ctx, sentinel.FollowFilter{Cursor: strconv.FormatInt(hi, 10) + ":" + strconv.FormatInt(lo, 10) + "-" + strconv.FormatInt(hi-1, 10)},
		func(ev sentinel.Event) error {
			if seen[ev.ID] {
				t.Errorf("event %d delivered twice", ev.ID)
			}
			seen[ev.ID] = true
			if len(seen)%10_000 == 0 {
				runtime.GC()
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				peak = max(peak, m.HeapAlloc)
			}
			if int64(len(seen)) == hi-lo {
				cancel()
			}
			return nil
		})
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, seen, int(hi-lo))
	tr.mu.Lock()
	defer tr.mu.Unlock()
	most := int64(0)
	for _, r := range tr.rows {
		most = max(most, r)
	}
	t.Logf("%d reads, at most %d rows in one; live heap at most %.1f MiB over the start", len(tr.rows), most, float64(peak-min(peak, base.HeapAlloc))/(1<<20))
	require.LessOrEqual(t, most, int64(2*500), "rows returned by one follow read")
	// The map of seen IDs (100,000 entries, ~3 MiB) is the test's own.
	require.Less(t, peak-min(peak, base.HeapAlloc), uint64(24<<20), "live heap growth while following")
}

// Issue 26.4: a cursor past the bounds is refused with ErrInvalid before
// anything is read.
func TestFollowCursorBounds(t *testing.T) {
	e := newEnv(t)
	c := e.client(nil)
	many := make([]string, sentinel.MaxFollowCursorRanges+1)
	for i := range many {
		many[i] = strconv.Itoa(2*i + 1)
	}
	for _, cur := range []string{
		"3000000:1-" + strconv.Itoa(sentinel.MaxFollowCursorIDs+1),
		"3000000:1-1000,2000-" + strconv.Itoa(2000+sentinel.MaxFollowCursorIDs-1000),
		"9223372036854775807:1-9223372036854775806",
		"100000:" + strings.Join(many, ","),
	} {
		err := c.Follow(ctxT(t), sentinel.FollowFilter{Cursor: cur}, func(sentinel.Event) error { return nil })
		require.True(t, errors.Is(err, sentinel.ErrInvalid), "%.40s...: %v", cur, err)
	}
	// At the bounds: accepted.
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	for _, cur := range []string{
		"3000000:1-" + strconv.Itoa(sentinel.MaxFollowCursorIDs),
		"100000:" + strings.Join(many[:len(many)-1], ","),
	} {
		err := c.Follow(ctx, sentinel.FollowFilter{Cursor: cur}, func(sentinel.Event) error { return nil })
		require.ErrorIs(t, err, context.Canceled, "%.40s...", cur)
	}
}

// More gaps than one read probes, and a wide gap with holes (IDs that
// never committed): every event the cursor names is delivered once, in
// turn, and nothing it does not name.
func TestFollowCursorManyGapsAndHoles(t *testing.T) {
	e := newEnv(t)
	_, err := admin.Exec(ctxT(t), "INSERT INTO "+e.table("events")+` (namespace, key, event, state, token, owner)
		SELECT 'default', 'k' || i, 'claimed', 'claimed', i, 'o' FROM generate_series(1, 4000) i`)
	require.NoError(t, err)
	var first int64
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT min(id) FROM "+e.table("events")).Scan(&first))
	// Holes: every seventh ID of the wide range never committed.
	_, err = admin.Exec(ctxT(t), "DELETE FROM "+e.table("events")+" WHERE id BETWEEN $1 AND $2 AND id % 7 = 0", first+2000, first+3998)
	require.NoError(t, err)
	want := map[int64]bool{}
	var parts []string
	for i := int64(0); i < 2000; i += 2 { // 1,000 single-ID gaps
		parts = append(parts, strconv.FormatInt(first+i, 10))
		want[first+i] = true
	}
	parts = append(parts, strconv.FormatInt(first+2000, 10)+"-"+strconv.FormatInt(first+3998, 10))
	for id := first + 2000; id <= first+3998; id++ {
		if id%7 != 0 {
			want[id] = true
		}
	}
	c := e.client(nil)
	col, cancel, _ := follow(t, c, sentinel.FollowFilter{Cursor: strconv.FormatInt(first+3999, 10) + ":" + strings.Join(parts, ",")})
	defer cancel()
	col.waitFor(t, "every event the cursor names", func(evs []sentinel.Event) bool { return len(evs) >= len(want) })
	// A new event after them: delivered, so the follower went on.
	_, err = admin.Exec(ctxT(t), "INSERT INTO "+e.table("events")+` (namespace, key, event, state, token, owner) VALUES ('default', 'last', 'claimed', 'claimed', 1, 'o')`)
	require.NoError(t, err)
	col.waitFor(t, "the new event", func(evs []sentinel.Event) bool { return evs[len(evs)-1].Key == "last" })
	evs := col.events()
	require.Len(t, evs, len(want)+1)
	for _, ev := range evs[:len(evs)-1] {
		require.True(t, want[ev.ID], "event %d delivered, not named by the cursor (or twice)", ev.ID)
		delete(want, ev.ID)
	}
}

// A follower holding more gaps than one read probes (more transactions
// writing events in flight at once than a cursor may name) probes the
// lowest ones first and delivers every event once, in ID order.
func TestFollowMoreGapsThanOneReadProbes(t *testing.T) {
	e := newEnv(t)
	_, err := admin.Exec(ctxT(t), "INSERT INTO "+e.table("events")+` (namespace, key, event, state, token, owner)
		SELECT 'default', 'k', 'claimed', 'claimed', i, 'o' FROM generate_series(1, 3000) i`)
	require.NoError(t, err)
	var first int64
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT min(id) FROM "+e.table("events")).Scan(&first))
	var gaps [][2]int64
	for i := int64(0); i < 3000; i += 2 {
		gaps = append(gaps, [2]int64{first + i, first + i})
	}
	require.Greater(t, len(gaps), sentinel.MaxFollowCursorRanges)
	tr := &rowsTracer{}
	c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.ConnConfig.Tracer = tr }), nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	var got []int64
	err = sentinel.FollowFromGaps(ctx, c, first+2999, gaps, func(ev sentinel.Event) error {
		got = append(got, ev.ID)
		if len(got) == len(gaps) {
			cancel()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	for i, id := range got {
		require.Equal(t, gaps[i][0], id, "delivery %d", i)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, r := range tr.rows {
		require.LessOrEqual(t, r, int64(2*500))
	}
}
