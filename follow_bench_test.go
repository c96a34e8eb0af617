package sentinel_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sentinel-coordination/sentinel"
)

// Fresh Once with followers attached: Follow polls the event table and adds
// nothing to Once's statements, so the figure should match BenchmarkOnceFresh
// (the followers=0 case). Compare, for example:
//
//	go test -run '^$' -bench 'OnceFreshFollowers' -benchtime 3s -count 3
//
// Each follower uses the default PollInterval (200ms, faster after
// activity: under this load it reads every 50ms) and delivers to a counter.
func BenchmarkOnceFreshFollowers(b *testing.B) {
	for _, followers := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("followers=%d", followers), func(b *testing.B) {
			e := newEnv(b)
			c := e.client(nil)
			ctx := benchCtx(b)
			fctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var delivered sync.Map
			// Followers read on a pool of their own (as a console would),
			// untraced: stmts/op counts the Once client's statements only.
			fp, err := pgxpool.New(ctx, dbURL)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(fp.Close)
			fc := e.clientOn(fp, nil)
			for i := range followers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					n := 0
					_ = fc.Follow(fctx, sentinel.FollowFilter{}, func(sentinel.Event) error { n++; delivered.Store(i, n); return nil })
				}()
			}
			time.Sleep(300 * time.Millisecond) // followers in place
			prefix := uuid.NewString()[:8] + "-"
			ops := 0
			e.stmts.n.Store(0)
			for b.Loop() {
				ops++
				res, err := sentinel.Once(ctx, c, prefix+strconv.Itoa(ops), benchCharge)
				if err != nil || res.Cached {
					b.Fatalf("Once: cached=%v err=%v", res.Cached, err)
				}
			}
			b.StopTimer()
			stmts := e.stmts.n.Load()
			stop()
			wg.Wait()
			if ops > 0 {
				b.ReportMetric(float64(stmts)/float64(ops), "stmts/op")
			}
			total := 0
			delivered.Range(func(_, v any) bool { total += v.(int); return true })
			if followers > 0 {
				b.ReportMetric(float64(total)/float64(followers*ops), "events/op/follower")
			}
		})
	}
}
