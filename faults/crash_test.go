package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Scenario 1: worker processes run Once over a key set while the driver
// SIGKILLs them at chosen moments (before the claim, inside fn before and
// after the side effect, after fn before the completion is reported, or at
// a random time) and restarts them. Properties: see auditOnce; and every
// key whose worker died inside fn stays uncertain under the token of that
// run (never silently re-run). Then every uncertain key is reconciled and
// the end state must be exactly once.

const crashTTL = 2 * time.Second

func crashKey(prefix string, i int) string { return fmt.Sprintf("%sk%05d", prefix, i) }

// onceWorker runs Once over SF_KEYS keys in a random order (seed SF_SEED)
// until each is completed (ran or cached) or uncertain. Output lines:
//
//	start PID
//	call KEY
//	fn-enter KEY TOKEN / effect KEY TOKEN / fn-return KEY TOKEN
//	ran KEY TOKEN / cached KEY TOKEN ok|bad / uncertain KEY TOKEN
//	error KEY MESSAGE
//	exit
func onceWorker() error {
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv("SF_KEYS"))
	prefix := os.Getenv("SF_PREFIX")
	seed, _ := strconv.ParseUint(os.Getenv("SF_SEED"), 10, 64)
	name := os.Getenv("SF_NAME")
	cfg, err := pgxpool.ParseConfig(os.Getenv("SF_DB"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 3
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := sentinel.New(pool, &sentinel.Config{
		DefaultTTL: envDuration("SF_TTL", crashTTL),
		Owner:      fmt.Sprintf("%s-pid%d", name, os.Getpid()),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	emit("start %d", os.Getpid())

	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	pending := rng.Perm(n)
	for len(pending) > 0 {
		var later []int
		for _, i := range pending {
			k := crashKey(prefix, i)
			emit("call %s", k)
			res, err := sentinel.Once(ctx, c, k, effectFn(pool, k, name, 15*time.Millisecond,
				func(stage string, tok int64) { emit("%s %s %d", stage, k, tok) }))
			var ee *sentinel.ExecutionError
			switch {
			case err == nil && res.Cached:
				ok := "ok"
				if res.Value != (effect{Key: k, Token: res.Token, Digest: digest(k)}) {
					ok = "bad"
				}
				emit("cached %s %d %s", k, res.Token, ok)
			case err == nil:
				emit("ran %s %d", k, res.Token)
			case errors.Is(err, sentinel.ErrUncertain) && errors.As(err, &ee):
				emit("uncertain %s %d", k, ee.Token)
			case errors.Is(err, sentinel.ErrInProgress), errors.Is(err, sentinel.ErrReconciling):
				later = append(later, i)
			default:
				emit("error %s %s", k, strings.ReplaceAll(err.Error(), "\n", " "))
				later = append(later, i)
			}
		}
		if len(later) > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		pending = later
	}
	emit("exit")
	return nil
}

// crashWorker is the driver's view of one worker slot.
type crashWorker struct {
	c   *child
	arm atomic.Pointer[string] // kill on the next line with this event
}

// death is where a killed worker was, from the last line it wrote.
type death struct {
	phase string
	key   string
	token int64
}

func classifyDeath(last string) death {
	f := strings.Fields(last)
	if len(f) == 0 {
		return death{phase: "startup"}
	}
	d := death{}
	if len(f) > 1 {
		d.key = f[1]
	}
	if len(f) > 2 {
		d.token, _ = strconv.ParseInt(f[2], 10, 64)
	}
	switch f[0] {
	case "start":
		d.phase = "startup"
	case "call":
		d.phase = "before fn (read or claim)"
	case "fn-enter":
		d.phase = "inside fn, before the side effect"
	case "effect":
		d.phase = "inside fn, after the side effect"
	case "fn-return":
		d.phase = "after fn, before the completion was reported"
	default:
		d.phase = "between calls"
	}
	return d
}

func TestCrashingWorkers(t *testing.T) {
	p := prof()
	ctx := ctxT(t, 15*time.Minute)
	cl := startCluster(t, nil)
	pool := newPool(t, cl.URL(), nil)
	setupSchema(t, pool)
	client := newClient(t, pool, sentinel.Config{DefaultTTL: crashTTL, Owner: "driver"})

	var total crashStats
	total.phases = map[string]int{}
	var violations int
	for r := range p.CrashRounds {
		t.Run(fmt.Sprintf("round%d", r), func(t *testing.T) {
			st := crashRound(t, ctx, p, cl.URL(), pool, client, fmt.Sprintf("r%d-", r))
			total.add(st)
		})
	}
	if t.Failed() {
		violations = -1 // see the failed rounds
	}
	report(t, "crash", map[string]any{
		"rounds": p.CrashRounds, "workers": p.CrashWorkers, "keys_per_round": p.CrashKeys,
		"processes": total.processes, "kills": total.kills, "kill_phases": total.phases,
		"died_inside_fn": total.diedInFn, "completed_before_reconcile": total.completed,
		"uncertain": total.uncertain, "forced": total.forced, "reset_and_rerun": total.reset,
		"worker_lines": total.lines, "transient_errors": total.errs, "run_s": total.runS, "violations": violations,
	})
	require.Positive(t, total.diedInFn, "no kill landed inside fn: the scenario did not test what it claims")
}

// crashStats are one round's numbers.
type crashStats struct {
	processes, kills, diedInFn, completed, uncertain, forced, reset, lines, errs int
	phases                                                                       map[string]int
	runS                                                                         float64
}

func (c *crashStats) add(o crashStats) {
	c.processes += o.processes
	c.kills += o.kills
	c.diedInFn += o.diedInFn
	c.completed += o.completed
	c.uncertain += o.uncertain
	c.forced += o.forced
	c.reset += o.reset
	c.lines += o.lines
	c.errs += o.errs
	c.runS += o.runS
	for k, n := range o.phases {
		c.phases[k] += n
	}
}

// crashRound runs one round over fresh keys named prefix+kNNNNN.
func crashRound(t *testing.T, ctx context.Context, p profile, url string, pool *pgxpool.Pool, client *sentinel.Client, prefix string) crashStats {
	var (
		v        violations
		mu       sync.Mutex
		fnEnters = map[string][]int64{} // key -> tokens of fn runs begun
		ran      = map[string]int64{}   // key -> token of a call that returned success
		resolved = map[string]bool{}
		lines    int
		errs     []string
	)
	onLine := func(w *crashWorker) func(*child, string) {
		return func(c *child, line string) {
			f := strings.Fields(line)
			if len(f) == 0 {
				return
			}
			if a := w.arm.Load(); a != nil && *a == f[0] && w.arm.CompareAndSwap(a, nil) {
				c.kill()
			}
			mu.Lock()
			defer mu.Unlock()
			lines++
			switch f[0] {
			case "fn-enter":
				tok, _ := strconv.ParseInt(f[2], 10, 64)
				fnEnters[f[1]] = append(fnEnters[f[1]], tok)
			case "ran":
				tok, _ := strconv.ParseInt(f[2], 10, 64)
				if prev, ok := ran[f[1]]; ok && prev != tok {
					v.add("key %s: two calls returned success, tokens %d and %d", f[1], prev, tok)
				}
				ran[f[1]] = tok
				resolved[f[1]] = true
			case "cached":
				if f[3] != "ok" {
					v.add("key %s: cached result differs from the value of its execution: %s", f[1], line)
				}
				resolved[f[1]] = true
			case "uncertain":
				resolved[f[1]] = true
			case "error":
				errs = append(errs, line)
			}
		}
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	spawned := 0
	start := func(slot int) *crashWorker {
		w := &crashWorker{}
		spawned++
		name := fmt.Sprintf("w%d", slot)
		w.c = spawn(t, name, "once", []string{
			"SF_DB=" + url, "SF_NAME=" + name, "SF_KEYS=" + strconv.Itoa(p.CrashKeys), "SF_PREFIX=" + prefix,
			"SF_SEED=" + strconv.FormatUint(rng.Uint64(), 10), "SF_TTL=" + crashTTL.String(),
		}, onLine(w))
		return w
	}
	workers := make([]*crashWorker, p.CrashWorkers)
	for i := range workers {
		workers[i] = start(i)
	}

	targets := []string{"call", "fn-enter", "effect", "fn-return", "random"}
	phases := map[string]int{}
	deaths := map[string]death{} // key -> last death inside or right after fn
	kills := 0
	allResolved := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(resolved) == p.CrashKeys
	}
	began := time.Now()
	for kills < p.CrashKills && !allResolved() {
		time.Sleep(time.Duration(20+rng.IntN(100)) * time.Millisecond)
		var live []int
		for i, w := range workers {
			if !w.c.hasExited() {
				live = append(live, i)
			}
		}
		if len(live) == 0 {
			break
		}
		i := live[rng.IntN(len(live))]
		w := workers[i]
		target := targets[rng.IntN(len(targets))]
		if target == "random" {
			time.Sleep(time.Duration(rng.IntN(50)) * time.Millisecond)
			w.c.kill()
		} else {
			w.arm.Store(&target)
			select {
			case <-w.c.exited:
			case <-time.After(3 * time.Second):
				w.arm.Store(nil)
				w.c.kill()
			}
		}
		<-w.c.exited
		if w.c.cmd.ProcessState.ExitCode() == 0 {
			continue // it finished its keys before the kill landed
		}
		kills++
		d := classifyDeath(w.c.lastLine())
		phases[d.phase]++
		if strings.HasPrefix(d.phase, "inside fn") || strings.HasPrefix(d.phase, "after fn") {
			deaths[d.key] = d
		}
		workers[i] = start(i)
	}

	// Let every worker finish its pass.
	for _, w := range workers {
		select {
		case <-w.c.exited:
		case <-time.After(5 * time.Minute):
			t.Fatalf("worker %s did not finish; last line %q; stderr:\n%s", w.c.name, w.c.lastLine(), w.c.stderr.tail(20))
		}
		if code := w.c.exitCode(); code != 0 {
			t.Fatalf("worker %s exited with %d; stderr:\n%s", w.c.name, code, w.c.stderr.tail(30))
		}
		if strings.Contains(w.c.stderr.String(), "DATA RACE") {
			t.Fatalf("worker %s: data race:\n%s", w.c.name, w.c.stderr.String())
		}
	}
	elapsed := time.Since(began)
	// Leases of killed workers that nobody looked at again may still run.
	time.Sleep(crashTTL)

	keys := make([]string, p.CrashKeys)
	for i := range keys {
		keys[i] = crashKey(prefix, i)
	}
	mu.Lock()
	for k, toks := range fnEnters {
		if len(toks) > 1 {
			v.add("key %s: fn entered %d times (tokens %v)", k, len(toks), toks)
		}
	}
	ranCopy := make(map[string]int64, len(ran))
	for k, tok := range ran {
		ranCopy[k] = tok
	}
	mu.Unlock()
	a := auditOnce(t, ctx, pool, client, keys, ranCopy, true, &v)

	// A worker that died inside fn left its key uncertain under that run's
	// token; one that died after fn left it uncertain or completed under
	// that token. No other worker ran it.
	db := readKeys(t, ctx, pool, prefix)
	diedInFn := 0
	for k, d := range deaths {
		s := db[k]
		switch {
		case s.token != d.token:
			v.add("key %s: worker died %s (token %d) but the key is %s under token %d", k, d.phase, d.token, s.state, s.token)
		case strings.HasPrefix(d.phase, "inside fn"):
			diedInFn++
			if s.state != sentinel.StateExecuting {
				v.add("key %s: worker died %s but the key is %s", k, d.phase, s.state)
			}
		}
	}
	v.require(t)

	// Reconcile the uncertain keys, then everything must be exactly once.
	rs := reconcileUncertain(t, ctx, pool, client, a.Uncertain, &v)
	auditFinal(t, ctx, pool, keys, &v)
	v.require(t)

	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Logf("transient errors reported by workers (retried): %d, first: %s", len(errs), errs[0])
	}
	t.Logf("round %s: %d kills %v, %d died inside fn, %d uncertain (%d forced, %d reset and re-run), %.1fs",
		prefix, kills, phases, diedInFn, len(a.Uncertain), rs.Forced, rs.Reset, elapsed.Seconds())
	return crashStats{processes: spawned, kills: kills, diedInFn: diedInFn, completed: a.Completed,
		uncertain: len(a.Uncertain), forced: rs.Forced, reset: rs.Reset, lines: lines, errs: len(errs),
		phases: phases, runS: elapsed.Seconds()}
}
