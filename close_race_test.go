package sentinel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// closeRaceTTL is long, so a grant left behind by Close would show: it
// would hold its key for half a minute instead of being given back.
const closeRaceTTL = 30 * time.Second

// Issue 17.1: a term won while Close ran got no deadline timer and no
// renewals; OnElected started and its ctx never ended, Run never returned,
// and another elector took over only after the TTL. Now the term is given
// back at once, OnElected never starts, and Run returns ErrClosed.
func TestElectorCloseDuringCampaign(t *testing.T) {
	for _, stmt := range []struct{ name, match string }{
		{"campaign", "mp AS ("}, // Close begins while the winning campaign's reply is on its way
		{"join", "gc AS ("},     // ... while the member row's
	} {
		t.Run(stmt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			tr := &hookTracer{match: stmt.match}
			c := e.clientOn(e.pool(func(p *pgxpool.Config) { p.ConnConfig.Tracer = tr }), &sentinel.Config{DefaultTTL: closeRaceTTL})
			var started atomic.Int32
			el, err := c.Elector("g", sentinel.ElectorOptions{OnElected: func(ctx context.Context, term int64) {
				started.Add(1)
				<-ctx.Done()
			}})
			require.NoError(t, err)
			closeDuring(tr, c)
			errc := make(chan error, 1)
			go func() { errc <- el.Run(ctx) }()
			select {
			case err := <-errc:
				require.ErrorIs(t, err, sentinel.ErrClosed)
			case <-time.After(15 * time.Second):
				t.Fatalf("Run did not return after Close (IsLeader %v, OnElected started %d)", el.IsLeader(), started.Load())
			}
			require.Zero(t, started.Load(), "OnElected started for a term won as the client closed")
			require.False(t, el.IsLeader())
			checkNoGrantSurvives(t, e, "g")
		})
	}
}

// checkNoGrantSurvives asserts that nothing is held in e's schema, and that
// another client is elected for group at once, not after the TTL.
func checkNoGrantSurvives(t *testing.T, e *env, groups ...string) {
	t.Helper()
	require.Zero(t, e.count("leaders", "expires_at > clock_timestamp()"), "a term survived Close")
	require.Zero(t, e.count("members", "expires_at > clock_timestamp()"), "a member row survived Close")
	require.Zero(t, e.count("leases", "expires_at > clock_timestamp()"), "a lease survived Close")
	require.Zero(t, e.count("tickets", "expires_at > clock_timestamp()"), "a ticket survived Close")
	require.Zero(t, e.count("executions", "lease_expires_at > clock_timestamp()"), "an execution lease survived Close")
	for _, g := range groups {
		other, err := e.client(&sentinel.Config{DefaultTTL: closeRaceTTL}).Elector(g, sentinel.ElectorOptions{})
		require.NoError(t, err)
		stop := runElector(t, other)
		waitFor(t, 5*time.Second, "another elector to lead "+g+" at once", other.IsLeader)
		require.NoError(t, stop())
	}
}

// Issue 17.1: Close raced against campaigns and grants of every kind, many
// times at random moments: whatever was granted is given back by Close or
// by the call that got it, every call returns, and nothing stays held.
func TestCloseRacingGrantsLeavesNothingHeld(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t)
	p := e.pool(nil)
	const rounds = 25
	var groups []string
	for i := range rounds {
		c := e.clientOn(p, &sentinel.Config{DefaultTTL: closeRaceTTL})
		group := fmt.Sprintf("g%d", i)
		groups = append(groups, group)
		var active atomic.Int32
		el, err := c.Elector(group, sentinel.ElectorOptions{OnElected: func(ctx context.Context, term int64) {
			active.Add(1)
			defer active.Add(-1)
			<-ctx.Done()
		}})
		require.NoError(t, err)
		done := make(chan string, 4)
		var returned [4]atomic.Bool // Run, Lease, Turn, Once
		go func() {
			defer returned[0].Store(true)
			err := el.Run(ctx)
			if !errors.Is(err, sentinel.ErrClosed) {
				done <- fmt.Sprintf("Run: %v", err)
				return
			}
			done <- ""
		}()
		go func() {
			defer returned[1].Store(true)
			l, err := c.Lease(ctx, group)
			switch {
			case err == nil:
				<-l.Done()
				done <- ""
			case errors.Is(err, sentinel.ErrClosed):
				done <- ""
			default:
				done <- fmt.Sprintf("Lease: %v", err)
			}
		}()
		go func() {
			defer returned[2].Store(true)
			tn, err := c.Turn(ctx, group)
			switch {
			case err == nil:
				<-tn.Done()
				done <- ""
			case errors.Is(err, sentinel.ErrClosed):
				done <- ""
			default:
				done <- fmt.Sprintf("Turn: %v", err)
			}
		}()
		go func() {
			defer returned[3].Store(true)
			_, err := sentinel.Once(ctx, c, group, func(ctx context.Context) (int, error) {
				<-ctx.Done() // runs until Close ends its lease
				return 0, sentinel.Retryable(context.Cause(ctx))
			})
			if err != nil && !errors.Is(err, sentinel.ErrClosed) && !errors.Is(err, sentinel.ErrLeaseLost) &&
				!errors.Is(err, sentinel.ErrInProgress) {
				done <- fmt.Sprintf("Once: %v", err)
				return
			}
			done <- ""
		}()
		time.Sleep(time.Duration(rand.N(8000)) * time.Microsecond) // before, during or after the grants
		c.Close()
		for range 4 {
			select {
			case msg := <-done:
				require.Empty(t, msg, "round %d", i)
			case <-time.After(15 * time.Second):
				t.Fatalf("round %d: a call did not return after Close (Run, Lease, Turn, Once returned: %v %v %v %v; IsLeader %v)",
					i, returned[0].Load(), returned[1].Load(), returned[2].Load(), returned[3].Load(), el.IsLeader())
			}
		}
		require.Zero(t, active.Load(), "round %d: OnElected still running after Run returned", i)
	}
	checkNoGrantSurvives(t, e, groups[0], groups[rounds-1])
}
