package sentinel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A service's main that cancels Run's ctx (or not), calls Close and
// returns: the term is released by Run once OnElected returned, and Close
// returned before that, so a process that then exited left the term live
// until it expired (in 2 runs of 10 of the docs' own main, a TTL's wait
// for the follower). Close now waits, within its deadline, for the terms
// under way to be released.
func TestCloseWaitsForTheTermsRelease(t *testing.T) {
	for _, cancelFirst := range []bool{true, false} {
		name := "close only"
		if cancelFirst {
			name = "cancel Run's ctx, then close"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t)
			const ttl = 30 * time.Second
			c := e.client(&sentinel.Config{DefaultTTL: ttl})
			observer := e.client(nil)
			el, err := c.Elector("scheduler", sentinel.ElectorOptions{
				OnElected: func(ctx context.Context, term int64) {
					<-ctx.Done()
					time.Sleep(300 * time.Millisecond) // the scheduler's own shutdown
				},
			})
			require.NoError(t, err)
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- el.Run(rctx) }()
			waitFor(t, 10*time.Second, "the elector to lead", el.IsLeader)

			if cancelFirst {
				cancel()
			}
			begin := time.Now()
			c.Close()
			took := time.Since(begin)
			// What a process exiting now leaves behind.
			_, lerr := observer.Leader(ctx, "scheduler")
			require.ErrorIs(t, lerr, sentinel.ErrNoLeader, "Close returned (after %s) with the term still live: it would stay so for its TTL (%s)", took, ttl)
			require.Less(t, took, c.Config().ReleaseTimeout, "Close waited for its deadline, not for the release")
			select {
			case err := <-ran:
				if !cancelFirst {
					require.ErrorIs(t, err, sentinel.ErrClosed)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not return")
			}
		})
	}
}
