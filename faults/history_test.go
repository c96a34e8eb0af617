package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/lockmodel"
)

// The checker must be able to fail on the histories the scenarios record,
// not only on hand-written ones: record a real history, check that it is
// linearizable, then corrupt it in the ways a broken lease would and
// require the checker to reject each corruption.
func TestCheckerRejectsCorruptedRealHistories(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	cl := startCluster(t, nil)
	admin := newPool(t, cl.URL(), nil)
	setupSchema(t, admin)
	lr := newLeaseRun(admin)
	lctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for i := range 3 {
		pool := newPool(t, cl.URL(), nil)
		a := &actor{id: i, pool: pool, keys: []string{"h"},
			client: newClient(t, pool, sentinel.Config{DefaultTTL: time.Second, Owner: fmt.Sprintf("h%d", i)}),
			hold:   func() time.Duration { return time.Duration(5+rand.IntN(20)) * time.Millisecond },
			// Never hold until loss: only releases, so grants are spaced.
			holdUntilDone: func() bool { return false }, acquireWait: 2 * time.Second, writeEvery: 5 * time.Millisecond}
		wg.Add(1)
		go func() { defer wg.Done(); lr.run(lctx, a) }()
	}
	wg.Wait()
	hist := lr.rec.History()
	require.Equal(t, porcupine.Ok, lockmodel.Check(hist, time.Minute), "the real history")

	// Successful acquires in call order.
	var acq []int
	for i, op := range hist {
		if in := op.Input.(lockmodel.Input); in.Kind == lockmodel.Acquire && op.Output.(lockmodel.Output).Result == lockmodel.OK {
			acq = append(acq, i)
		}
	}
	sort.Slice(acq, func(a, b int) bool { return hist[acq[a]].Call < hist[acq[b]].Call })
	require.GreaterOrEqual(t, len(acq), 10, "too few grants to corrupt")
	// Two grants that do not overlap in time, the first well before the second.
	first, second := hist[acq[2]], hist[acq[len(acq)-3]]
	require.Less(t, first.Return, second.Call)
	tok1 := first.Output.(lockmodel.Output).Token
	tok2 := second.Output.(lockmodel.Output).Token

	corrupt := map[string]func([]porcupine.Operation) []porcupine.Operation{
		"tokens of two grants swapped": func(h []porcupine.Operation) []porcupine.Operation {
			h[acq[2]].Output = lockmodel.Output{Result: lockmodel.OK, Token: tok2}
			h[acq[len(acq)-3]].Output = lockmodel.Output{Result: lockmodel.OK, Token: tok1}
			return h
		},
		"an early holder still trusts its lease after a later grant": func(h []porcupine.Operation) []porcupine.Operation {
			in := first.Input.(lockmodel.Input)
			return append(h, porcupine.Operation{ClientId: in.Client,
				Input:  lockmodel.Input{Kind: lockmodel.Held, Key: in.Key, Client: in.Client, Token: tok1},
				Output: lockmodel.Output{Result: lockmodel.OK}, Call: second.Return + 1, Return: second.Return + 1})
		},
		"a stale write accepted after a later grant": func(h []porcupine.Operation) []porcupine.Operation {
			in := first.Input.(lockmodel.Input)
			return append(h, porcupine.Operation{ClientId: in.Client,
				Input:  lockmodel.Input{Kind: lockmodel.Write, Key: in.Key, Client: in.Client, Token: tok1},
				Output: lockmodel.Output{Result: lockmodel.OK}, Call: second.Return + 1, Return: second.Return + 2})
		},
	}
	for name, f := range corrupt {
		t.Run(name, func(t *testing.T) {
			h := f(append([]porcupine.Operation(nil), hist...))
			require.Equal(t, porcupine.Illegal, lockmodel.Check(h, time.Minute))
		})
	}
}
