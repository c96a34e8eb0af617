package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// effect is the value a scenario's Once fn returns, derived from the key
// and tied to the execution (token) that produced it. The same triple is
// written to side_effects, so a stored result can be compared with the
// side effect it stands for.
type effect struct {
	Key    string `json:"key"`
	Token  int64  `json:"token"`
	Digest string `json:"digest"`
}

func digest(key string) string {
	h := sha256.Sum256([]byte("sentinel-faults:" + key))
	return hex.EncodeToString(h[:8])
}

// effectFn returns the Once fn the scenarios run: it writes the side
// effect in its own autocommit statement (the outside world: Sentinel can
// neither roll it back nor see it), then returns the value. It sleeps up
// to maxSleep before and after the write, so kills and faults land inside
// fn. stage, if set, is told "fn-enter", "effect" and "fn-return".
func effectFn(pool *pgxpool.Pool, key, worker string, maxSleep time.Duration,
	stage func(name string, token int64)) func(ctx context.Context) (effect, error) {
	return func(ctx context.Context) (effect, error) {
		tok, ok := sentinel.TokenFromContext(ctx)
		if !ok {
			return effect{}, errors.New("no token in fn's context")
		}
		if stage != nil {
			stage("fn-enter", tok)
		}
		v := effect{Key: key, Token: tok, Digest: digest(key)}
		if err := sleepCtx(ctx, randDur(maxSleep)); err != nil {
			return v, err
		}
		if _, err := pool.Exec(ctx, `INSERT INTO side_effects (key, token, digest, worker) VALUES ($1, $2, $3, $4)`,
			key, tok, v.Digest, worker); err != nil {
			return v, fmt.Errorf("side effect: %w", err)
		}
		if stage != nil {
			stage("effect", tok)
		}
		if err := sleepCtx(ctx, randDur(maxSleep)); err != nil {
			return v, err
		}
		if stage != nil {
			stage("fn-return", tok)
		}
		return v, nil
	}
}

func randDur(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// keyState is what the database says about one Once key.
type keyState struct {
	exists  bool
	state   sentinel.State
	token   int64
	alive   bool
	result  *effect
	effects []effect // side_effects rows, in commit order
	started int      // "started" history events (fn runs begun)
	resets  int      // "reset" history events (operator resets)
	given   int      // "released" history events: a claim given back before fn ran (its caller's ctx ended)
}

// readKeys loads the execution row, side effects and history counts of
// every key starting with prefix, in one pass per table.
func readKeys(t testing.TB, ctx context.Context, pool *pgxpool.Pool, prefix string) map[string]*keyState {
	t.Helper()
	out := map[string]*keyState{}
	get := func(k string) *keyState {
		if out[k] == nil {
			out[k] = &keyState{}
		}
		return out[k]
	}
	like := strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(prefix) + "%"
	rows, err := pool.Query(ctx, `SELECT key, state, token, coalesce(lease_expires_at > clock_timestamp(), false), result
		FROM sentinel.executions WHERE key LIKE $1`, like)
	require.NoError(t, err)
	defer func() { rows.Close() }() // also when a require below fails
	for rows.Next() {
		var k string
		var ks keyState
		var res []byte
		require.NoError(t, rows.Scan(&k, &ks.state, &ks.token, &ks.alive, &res))
		ks.exists = true
		if res != nil {
			var e effect
			require.NoError(t, json.Unmarshal(res, &e), "result of %s", k)
			ks.result = &e
		}
		s := get(k)
		ks.effects, ks.started, ks.resets, ks.given = s.effects, s.started, s.resets, s.given
		*s = ks
	}
	require.NoError(t, rows.Err())
	rows, err = pool.Query(ctx, `SELECT key, token, digest FROM side_effects WHERE key LIKE $1 ORDER BY id`, like)
	require.NoError(t, err)
	for rows.Next() {
		var e effect
		require.NoError(t, rows.Scan(&e.Key, &e.Token, &e.Digest))
		s := get(e.Key)
		s.effects = append(s.effects, e)
	}
	require.NoError(t, rows.Err())
	rows, err = pool.Query(ctx, `SELECT key, count(*) FILTER (WHERE event = 'started'), count(*) FILTER (WHERE event = 'reset'),
		count(*) FILTER (WHERE event = 'released')
		FROM sentinel.events WHERE key LIKE $1 GROUP BY key`, like)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var started, resets, given int
		require.NoError(t, rows.Scan(&k, &started, &resets, &given))
		s := get(k)
		s.started, s.resets, s.given = started, resets, given
	}
	require.NoError(t, rows.Err())
	return out
}

// onceAudit is the outcome of auditing Once keys before reconciliation.
type onceAudit struct {
	Completed int
	Uncertain []string // executing with an expired lease
	GivenBack []string // claimed with an expired lease, fn never started: run again
}

// auditOnce checks the at-most-once invariants over keys before any
// reconciliation:
//
//   - no side effect logged twice, and no fn started twice (history)
//     unless its first claim was given back before fn ran;
//   - every key is completed, uncertain (executing, lease expired) or
//     given back (claimed, lease expired, a "released" event, no side
//     effect: the library gives a claim back when its caller's ctx ends
//     before fn runs; it is run again here): nothing reconciling, held, or
//     (when mustExist) missing;
//   - every completed result equals the side effect of the execution that
//     holds the key (same token, same value) and is the only side effect;
//   - every call that returned success (ran: key -> token) is durable: the
//     key is completed under that token;
//   - every uncertain key stays uncertain for a new caller: Once returns
//     ErrUncertain without running fn.
func auditOnce(t testing.TB, ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, keys []string,
	ran map[string]int64, mustExist bool, v *violations) onceAudit {
	t.Helper()
	var a onceAudit
	db := readKeys(t, ctx, pool, commonPrefix(keys))
	for _, k := range keys {
		s := db[k]
		if s == nil {
			s = &keyState{}
		}
		if len(s.effects) > 1 {
			v.add("key %s: side effect logged %d times (tokens %v) with no operator reset", k, len(s.effects), tokensOf(s.effects))
		}
		if s.started > 1+s.given {
			v.add("key %s: fn started %d times with no operator reset (%d claims given back)", k, s.started, s.given)
		}
		if tok, ok := ran[k]; ok && (s.state != sentinel.StateCompleted || s.token != tok) {
			v.add("key %s: a call returned success under token %d, but the key is %s under token %d (lost completion)", k, tok, s.state, s.token)
		}
		switch {
		case !s.exists:
			if mustExist {
				v.add("key %s: no execution row", k)
			}
		case s.state == sentinel.StateCompleted:
			a.Completed++
			switch {
			case s.result == nil:
				v.add("key %s: completed without a result", k)
			case *s.result != (effect{Key: k, Token: s.token, Digest: digest(k)}):
				v.add("key %s: result %+v is not the value of its execution (token %d)", k, *s.result, s.token)
			case len(s.effects) != 1 || s.effects[0] != *s.result:
				v.add("key %s: result %+v but side effects %+v", k, *s.result, s.effects)
			}
		case s.state == sentinel.StateClaimed && !s.alive && s.given > 0 && len(s.effects) == 0:
			// A claim given back as its caller's ctx ended (the load's
			// end): fn never started, so any caller may run it. One does,
			// now, so the final audit finds the key completed once.
			a.GivenBack = append(a.GivenBack, k)
			res, err := sentinel.Once(ctx, c, k, effectFn(pool, k, "after-give-back", 0, nil))
			if err != nil || res.Cached {
				v.add("key %s: Once on a given-back claim: cached %v, err %v (want fn to run)", k, res.Cached, err)
			}
		case s.state == sentinel.StateExecuting && !s.alive:
			a.Uncertain = append(a.Uncertain, k)
			for _, e := range s.effects {
				if e.Token != s.token {
					v.add("key %s: side effect under token %d but the execution holds token %d", k, e.Token, s.token)
				}
			}
		default:
			v.add("key %s: left in state %s (lease alive %v)", k, s.state, s.alive)
		}
	}
	// A new caller must get ErrUncertain for every uncertain key, and fn
	// must not run.
	for _, k := range a.Uncertain {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (effect, error) {
			v.add("key %s: fn re-run on an uncertain key", k)
			return effect{}, nil
		})
		if !errors.Is(err, sentinel.ErrUncertain) {
			v.add("key %s: Once on an uncertain key returned %v, want ErrUncertain", k, err)
		}
	}
	return a
}

// commonPrefix returns the longest prefix shared by keys.
func commonPrefix(keys []string) string {
	if len(keys) == 0 {
		return ""
	}
	p := keys[0]
	for _, k := range keys[1:] {
		for !strings.HasPrefix(k, p) {
			p = p[:len(p)-1]
		}
	}
	return p
}

func tokensOf(es []effect) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Token)
	}
	return out
}

// reconcileStats counts what reconcileUncertain did.
type reconcileStats struct {
	Forced, Reset int
}

// reconcileUncertain resolves every uncertain key as an operator would:
// Reconcile (new token), then ForceComplete with the logged value when the
// side-effect log shows the work happened, or ResetToClaimed when it did
// not, after which a normal Once call runs fn again.
func reconcileUncertain(t testing.TB, ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, keys []string, v *violations) reconcileStats {
	t.Helper()
	var st reconcileStats
	db := readKeys(t, ctx, pool, commonPrefix(keys))
	for _, k := range keys {
		before := db[k]
		ex, err := c.Reconcile(ctx, k, sentinel.WithMetadata(map[string]any{"by": "faults suite"}))
		if err != nil {
			v.add("key %s: Reconcile: %v", k, err)
			continue
		}
		if ex.State != sentinel.StateReconciling || ex.Token <= before.token {
			v.add("key %s: Reconcile gave state %s token %d (was token %d)", k, ex.State, ex.Token, before.token)
		}
		switch len(before.effects) {
		case 0:
			if err := c.ResetToClaimed(ctx, k); err != nil {
				v.add("key %s: ResetToClaimed: %v", k, err)
				continue
			}
			st.Reset++
			res, err := sentinel.Once(ctx, c, k, effectFn(pool, k, "operator-rerun", 0, nil))
			if err != nil || res.Cached {
				v.add("key %s: re-run after reset: cached %v, err %v", k, res.Cached, err)
			}
		case 1:
			if err := c.ForceComplete(ctx, k, before.effects[0]); err != nil {
				v.add("key %s: ForceComplete: %v", k, err)
				continue
			}
			st.Forced++
		default:
			v.add("key %s: %d side effects, cannot reconcile", k, len(before.effects))
		}
	}
	return st
}

// auditFinal checks the end state after reconciliation: every key
// completed exactly once: one side effect, equal to the stored result, and
// at most one fn start per operator reset (plus the first).
func auditFinal(t testing.TB, ctx context.Context, pool *pgxpool.Pool, keys []string, v *violations) {
	t.Helper()
	db := readKeys(t, ctx, pool, commonPrefix(keys))
	for _, k := range keys {
		s := db[k]
		switch {
		case s == nil || !s.exists:
			v.add("final: key %s has no execution", k)
		case s.state != sentinel.StateCompleted || s.result == nil:
			v.add("final: key %s is %s", k, s.state)
		case len(s.effects) != 1:
			v.add("final: key %s has %d side effects", k, len(s.effects))
		case *s.result != s.effects[0] || s.result.Key != k || s.result.Digest != digest(k):
			v.add("final: key %s result %+v differs from its side effect %+v", k, *s.result, s.effects[0])
		case s.started > 1+s.resets+s.given:
			v.add("final: key %s started %d times with %d resets and %d claims given back", k, s.started, s.resets, s.given)
		}
	}
}
