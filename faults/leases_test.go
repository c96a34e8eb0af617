package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/lockmodel"
)

// leaseRun drives lease clients ("actors") that compete for a few keys,
// records every operation into a lockmodel history, and keeps per-grant
// facts on the local monotonic clock and on the database clock for the
// overlap checks.
type leaseRun struct {
	rec   *lockmodel.Recorder
	admin *pgxpool.Pool // direct to the server, for database-clock facts

	mu     sync.Mutex
	grants []*grant
}

// grant is one lease held by an actor.
type grant struct {
	key    string
	client int
	token  int64

	acqCall, acqReturn time.Time // local
	committed          time.Time // database clock: commit of the grant (zero if unknown)
	released           bool
	releaseUnknown     bool      // Release failed in transit: it may have committed
	releaseCall        time.Time // local
	deadline           time.Time // local: the lease's last Deadline
	doneSeen           time.Time // local: when a watcher saw Done close
	lastExpiry         time.Time // database clock: ExpiresAt as last renewed
	lost               bool      // ended by a loss, not by Release
	endErr             string    // why the lease ended (for diagnostics)
}

func newLeaseRun(admin *pgxpool.Pool) *leaseRun {
	return &leaseRun{rec: lockmodel.NewRecorder(), admin: admin}
}

// actor is one lease client's behaviour.
type actor struct {
	id     int
	client *sentinel.Client
	pool   *pgxpool.Pool // the client's pool, for its guarded writes
	keys   []string
	// hold returns how long to hold a lease; holdUntilDone, when it
	// returns true, keeps the lease until it is lost (a victim of a fault
	// is not allowed to release early).
	hold          func() time.Duration
	holdUntilDone func() bool
	acquireWait   time.Duration // bound on one waiting acquire
	writeEvery    time.Duration
	// backToBack makes the actor guard its writes back to back, with no
	// pause between transactions, so the lease row is almost never free
	// of a VerifyToken lock: its renewals must get through (issue 17.2).
	backToBack bool
	// onGrant, if set, is told of each acquisition (e.g. so a driver can
	// aim a fault at the current holder).
	onGrant func(a *actor, l *sentinel.Lease)

	successes atomic.Int64 // acquisitions so far
	lastOK    atomic.Int64 // recorder time of the last acquisition
}

func (r *leaseRun) run(ctx context.Context, a *actor) {
	for ctx.Err() == nil {
		key := a.keys[rand.IntN(len(a.keys))]
		r.hold(ctx, a, key)
	}
}

// hold acquires key (waiting), holds it with guarded writes, and releases
// it unless it was lost.
func (r *leaseRun) hold(ctx context.Context, a *actor, key string) {
	in := lockmodel.Input{Kind: lockmodel.Acquire, Key: key, Client: a.id}
	call := time.Now()
	actx, cancel := context.WithTimeout(ctx, a.acquireWait)
	l, err := a.client.Lease(actx, key, sentinel.WithWait())
	cancel()
	ret := time.Now()
	if err != nil {
		// Not acquired within the bound, or an error: a grant may have
		// committed without its reply reaching us.
		r.rec.Add(in, r.rec.At(call), lockmodel.Output{Result: lockmodel.Unknown}, r.rec.At(ret))
		_ = sleepCtx(ctx, 20*time.Millisecond)
		return
	}
	r.rec.Add(in, r.rec.At(call), lockmodel.Output{Result: lockmodel.OK, Token: l.Token()}, r.rec.At(ret))
	a.successes.Add(1)
	a.lastOK.Store(r.rec.At(ret))
	g := &grant{key: key, client: a.id, token: l.Token(), acqCall: call, acqReturn: ret}
	watched := make(chan struct{})
	go func() {
		<-l.Done()
		g.doneSeen = time.Now()
		close(watched)
	}()
	g.committed = r.commitTime(ctx, key, l.Token())
	if a.onGrant != nil {
		a.onGrant(a, l)
	}

	until := time.Now().Add(a.hold())
	for {
		if l.Err() != nil || ctx.Err() != nil || (!a.holdUntilDone() && time.Now().After(until)) {
			break
		}
		// The holder's belief, taken before its deadline: nobody else
		// may have been granted the key.
		if now := time.Now(); now.Before(l.Deadline()) && l.Err() == nil {
			r.rec.Add(lockmodel.Input{Kind: lockmodel.Held, Key: key, Client: a.id, Token: l.Token()},
				r.rec.At(now), lockmodel.Output{Result: lockmodel.OK}, r.rec.At(now))
		}
		r.write(ctx, a, l)
		if !a.backToBack {
			_ = sleepCtx(ctx, a.writeEvery)
		}
	}

	if l.Err() == nil {
		rin := lockmodel.Input{Kind: lockmodel.Release, Key: key, Client: a.id, Token: l.Token()}
		g.releaseCall = time.Now()
		// Retry a Release that failed (server unreachable) while the
		// lease is still ours locally. (A failed Release now ends the
		// lease and leaves the row to expire, so this rarely loops; before
		// that fix it kept the lease renewed: finding 3.)
		var err error
		for attempt := 0; ; attempt++ {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			err = l.Release(rctx)
			cancel()
			if err == nil || l.Err() != nil || attempt == 100 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		out := lockmodel.Output{Result: lockmodel.OK}
		if err != nil {
			out.Result = lockmodel.Unknown
		}
		r.rec.Add(rin, r.rec.At(g.releaseCall), out, r.rec.Now())
		g.released = err == nil
		// A Release whose reply was lost (the server crashed after its
		// commit) may have freed the key: the holder gave the lease up
		// when it called Release, so it is judged as released, not lost.
		// A Release that found the lease already gone (stale token) is a
		// loss the holder learned late, and stays judged as one.
		g.releaseUnknown = err != nil && !errors.Is(err, sentinel.ErrStaleToken)
	}
	<-watched
	g.deadline, g.lastExpiry = l.Deadline(), l.ExpiresAt()
	g.lost = errors.Is(l.Err(), sentinel.ErrLeaseLost) && !g.releaseUnknown
	if l.Err() != nil {
		g.endErr = l.Err().Error()
	}
	if g.lost {
		// The holder trusted its lease until Done closed: sometime
		// between its deadline (when the timer fires) and when the
		// watcher saw it.
		from := g.deadline
		if g.doneSeen.Before(from) {
			from = g.doneSeen
		}
		r.rec.Add(lockmodel.Input{Kind: lockmodel.Held, Key: key, Client: a.id, Token: l.Token()},
			r.rec.At(from), lockmodel.Output{Result: lockmodel.OK}, r.rec.At(g.doneSeen))
	}
	r.mu.Lock()
	r.grants = append(r.grants, g)
	r.mu.Unlock()
}

// write performs one guarded write under the lease's context (a holder
// stops when its lease ends) and records it.
func (r *leaseRun) write(ctx context.Context, a *actor, l *sentinel.Lease) {
	in := lockmodel.Input{Kind: lockmodel.Write, Key: l.Key(), Client: a.id, Token: l.Token()}
	lctx, cancel := l.Context(ctx)
	wctx, wcancel := context.WithTimeout(lctx, 2*time.Second)
	call := r.rec.Now()
	res := guardedWrite(wctx, a.pool, a.client, l.Key(), l.Token(), "actor", nil)
	ret := r.rec.Now()
	wcancel()
	cancel()
	out := lockmodel.Output{Result: lockmodel.Unknown}
	switch res {
	case "ok":
		out.Result = lockmodel.OK
	case "refused":
		out.Result = lockmodel.Refused
	}
	r.rec.Add(in, call, out, ret)
}

// commitTime reads when the grant of token committed, on the database
// clock (track_commit_timestamp). A renewal that already happened makes
// it later, which only weakens the check. Zero when unknown.
func (r *leaseRun) commitTime(ctx context.Context, key string, token int64) time.Time {
	qctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var ts *time.Time
	err := r.admin.QueryRow(qctx, `SELECT pg_xact_commit_timestamp(xmin) FROM sentinel.leases
		WHERE namespace = 'default' AND key = $1 AND token = $2`, key, token).Scan(&ts)
	if err != nil || ts == nil {
		return time.Time{}
	}
	return *ts
}

// leaseCheck is what check verified.
type leaseCheck struct {
	Ops, Grants, Lost, Released, ReleaseUnknown, GuardedWrites int
	Result                                                     porcupine.CheckResult
	MinGapMs                                                   float64 // smallest local gap between a lost holder's deadline and the next grant's return
}

// check verifies the recorded history:
//
//   - porcupine: the history is linearizable under the fenced-lease model;
//   - local monotonic clock: a lost holder's deadline, and the moment its
//     Done was seen closed, come before the next holder's acquire returned;
//     a released holder called Release before it;
//   - database clock: a lost holder's last known expiry is not after the
//     commit of the next grant;
//   - commit order: on each key, guarded writes appear in token order,
//     and their database timestamps do not interleave between tokens.
func (r *leaseRun) check(t testing.TB, ctx context.Context, v *violations) leaseCheck {
	t.Helper()
	var c leaseCheck
	hist := r.rec.History()
	c.Ops = len(hist)
	c.Result = lockmodel.Check(hist, 2*time.Minute)
	if c.Result != porcupine.Ok {
		path := filepath.Join(os.TempDir(), t.Name()+"-history.html")
		path = filepath.Clean(path)
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		_, _ = lockmodel.CheckVerbose(hist, 2*time.Minute, path)
		v.add("lease history (%d ops) is %s under the fenced-lease model; visualization: %s", len(hist), c.Result, path)
		if c.Result == porcupine.Illegal {
			t.Logf("the keys the model rejects:\n%s", lockmodel.Explain(hist, lockmodel.IllegalKeys(hist, time.Minute, 5)))
		}
	}

	r.mu.Lock()
	byKey := map[string][]*grant{}
	for _, g := range r.grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	r.mu.Unlock()
	c.MinGapMs = -1
	for key, gs := range byKey {
		sort.Slice(gs, func(i, j int) bool { return gs[i].token < gs[j].token })
		for i := 1; i < len(gs); i++ {
			a, b := gs[i-1], gs[i]
			if b.acqReturn.Before(a.acqCall) {
				v.add("key %s: token %d returned before token %d was requested", key, b.token, a.token)
			}
			if !a.lost {
				if (a.released || a.releaseUnknown) && b.acqReturn.Before(a.releaseCall) {
					v.add("key %s: token %d granted before holder %d released", key, b.token, a.token)
				}
				continue
			}
			if gap := b.acqReturn.Sub(a.deadline); gap < 0 {
				v.add("key %s: token %d granted %s before holder %d's deadline (holder ended: %s; release called: %v)",
					key, b.token, -gap, a.token, a.endErr, !a.releaseCall.IsZero())
			} else if c.MinGapMs < 0 || float64(gap.Microseconds())/1000 < c.MinGapMs {
				c.MinGapMs = float64(gap.Microseconds()) / 1000
			}
			if b.acqReturn.Before(a.doneSeen) {
				v.add("key %s: token %d granted %s before holder %d's Done was seen closed", key, b.token, a.doneSeen.Sub(b.acqReturn), a.token)
			}
			if !a.lastExpiry.IsZero() && !b.committed.IsZero() && b.committed.Before(a.lastExpiry) {
				v.add("key %s: token %d committed at %s, before holder %d's expiry %s (database clock)",
					key, b.token, b.committed.Format(time.RFC3339Nano), a.token, a.lastExpiry.Format(time.RFC3339Nano))
			}
		}
		for _, g := range gs {
			c.Grants++
			if g.lost {
				c.Lost++
			}
			if g.released {
				c.Released++
			}
			if g.releaseUnknown {
				c.ReleaseUnknown++
			}
		}
	}

	// Guarded writes: commit order (identity) and database time agree
	// with token order on each key.
	rows, err := r.admin.Query(ctx, `SELECT key, token, at FROM guarded_log ORDER BY key, id`)
	require.NoError(t, err)
	defer rows.Close()
	var lastKey string
	var lastTok int64
	var lastAt time.Time
	for rows.Next() {
		var key string
		var tok int64
		var at time.Time
		require.NoError(t, rows.Scan(&key, &tok, &at))
		c.GuardedWrites++
		if key == lastKey {
			if tok < lastTok {
				v.add("key %s: guarded write of token %d committed after one of token %d", key, tok, lastTok)
			}
			if tok != lastTok && at.Before(lastAt) {
				v.add("key %s: guarded write of token %d at %s precedes one of token %d at %s (database clock)", key, tok, at, lastTok, lastAt)
			}
		}
		lastKey, lastTok, lastAt = key, tok, at
	}
	require.NoError(t, rows.Err())
	return c
}
