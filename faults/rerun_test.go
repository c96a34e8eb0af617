package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/faults/internal/lockmodel"
)

// Scenario 12: re-runs after a crash (Once with WithRerun). Worker
// processes charge a card network that deduplicates by reference
// (sentinel.EffectKey) for every key of a shared key set, all of them
// contending for the same keys, while the driver SIGKILLs them (inside fn
// before and after the charge, after fn returned, at random) and SIGSTOPs
// some past their lease, then lets them go on. Killed workers are
// restarted; the keys they held are re-run by whoever comes next.
//
// Properties:
//   - 0 double charges: one charge per key at the network, whatever the
//     attempts, and each completed key's result is that charge;
//   - 0 operator cases for the keys whose bound the kills did not reach;
//     the keys with a bound of 2 attempts that the driver kills on every
//     attempt end uncertain after exactly 2 attempts (the bound holds);
//   - attempts never overlap: every attempt's grant, its writes guarded
//     by VerifyExecutionToken and its completion, and every refusal that
//     names a holder, form a history the fenced-lease model
//     (internal/lockmodel, checked with porcupine) accepts: a grant only
//     after the previous holder's lease ended, strictly increasing tokens,
//     no write of an earlier attempt accepted after a later one began;
//   - the history agrees: one started event per attempt, a rerun event
//     naming the previous attempt's token before each re-run, attempts
//     within the key's bound.

const (
	rerunTTL   = time.Second
	rerunBound = 6 // attempts of the ordinary keys
)

// rerunKey names key i; every tenth key is a bounded one ("b": 2 attempts).
func rerunKey(i int) string {
	if i%10 == 0 {
		return fmt.Sprintf("rr-b%04d", i)
	}
	return fmt.Sprintf("rr-k%04d", i)
}

func rerunBoundOf(key string) int {
	if strings.HasPrefix(key, "rr-b") {
		return 2
	}
	return rerunBound
}

const rerunDDL = `CREATE TABLE IF NOT EXISTS rerun_charges (
    id bigint GENERATED ALWAYS AS IDENTITY, ref text PRIMARY KEY, once_key text NOT NULL,
    requests int NOT NULL DEFAULT 1, tokens bigint[] NOT NULL)`

// rerunCharge is the card network: a charge per reference; a repeated
// reference is the same charge (its request counted).
func rerunCharge(ctx context.Context, pool *pgxpool.Pool, key string) (int64, error) {
	tok, _ := sentinel.TokenFromContext(ctx)
	var id int64
	err := pool.QueryRow(ctx, `INSERT INTO rerun_charges AS c (ref, once_key, tokens) VALUES ($1, $2, ARRAY[$3::bigint])
		ON CONFLICT (ref) DO UPDATE SET requests = c.requests + 1, tokens = c.tokens || $3::bigint RETURNING id`,
		sentinel.EffectKey(ctx), key, tok).Scan(&id)
	return id, err
}

// rerunWorker calls Once with WithRerun on every key of SF_KEYS in a random
// order (seed SF_SEED) until each is completed (ran or cached) or
// uncertain. Times are wall-clock nanoseconds. Output lines:
//
//	start PID
//	call KEY CALL                         Once is called
//	enter KEY TOKEN ATTEMPT CALL AT       fn began: the grant
//	charged KEY TOKEN ID
//	write KEY TOKEN ok|refused|error CALL RET
//	fn-return KEY TOKEN AT
//	ran KEY TOKEN RET / cached KEY TOKEN / uncertain KEY TOKEN
//	busy KEY TOKEN CALL RET               ErrInProgress naming a holder
//	error KEY MESSAGE
//	exit
func rerunWorker() error {
	ctx := context.Background()
	n, _ := strconv.Atoi(os.Getenv("SF_KEYS"))
	seed, _ := strconv.ParseUint(os.Getenv("SF_SEED"), 10, 64)
	name := os.Getenv("SF_NAME")
	cfg, err := pgxpool.ParseConfig(os.Getenv("SF_DB"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	c, err := sentinel.New(pool, &sentinel.Config{DefaultTTL: envDuration("SF_TTL", rerunTTL),
		Owner: fmt.Sprintf("%s-pid%d", name, os.Getpid())})
	if err != nil {
		return err
	}
	defer c.Close()
	emit("start %d", os.Getpid())
	rng := rand.New(rand.NewPCG(seed, seed^0x12e5))
	pending := rng.Perm(n)
	for len(pending) > 0 {
		var later []int
		for _, i := range pending {
			k := rerunKey(i)
			call := wall()
			emit("call %s %d", k, call)
			res, err := sentinel.Once(ctx, c, k, func(ctx context.Context) (string, error) {
				tok, _ := sentinel.TokenFromContext(ctx)
				emit("enter %s %d %d %d %d", k, tok, sentinel.Attempt(ctx), call, wall())
				// The adversarial fn: it goes on after its ctx ended (a
				// process frozen past its lease does until it notices), so
				// that fencing, not politeness, keeps attempts apart.
				wctx := context.WithoutCancel(ctx)
				time.Sleep(5*time.Millisecond + randDur(30*time.Millisecond))
				id, err := rerunCharge(wctx, pool, k)
				if err != nil {
					return "", err
				}
				emit("charged %s %d %d", k, tok, id)
				if strings.HasPrefix(k, "rr-b") {
					time.Sleep(time.Hour) // the driver kills every attempt of a bounded key here
				}
				wcall := wall()
				res := guardedExecWrite(wctx, pool, c, k, tok, name)
				emit("write %s %d %s %d %d", k, tok, res, wcall, wall())
				time.Sleep(randDur(30 * time.Millisecond))
				emit("fn-return %s %d %d", k, tok, wall())
				return fmt.Sprintf("ch_%d", id), nil
			}, sentinel.WithRerun(rerunBoundOf(k)))
			ret := wall()
			var ee *sentinel.ExecutionError
			switch {
			case err == nil && res.Cached:
				emit("cached %s %d", k, res.Token)
			case err == nil:
				emit("ran %s %d %d", k, res.Token, ret)
			case errors.Is(err, sentinel.ErrUncertain) && errors.As(err, &ee):
				emit("uncertain %s %d", k, ee.Token)
			case errors.Is(err, sentinel.ErrInProgress) && errors.As(err, &ee):
				emit("busy %s %d %d %d", k, ee.Token, call, ret)
				later = append(later, i)
			default:
				emit("error %s %s", k, strings.ReplaceAll(err.Error(), "\n", " "))
				later = append(later, i)
			}
		}
		if len(later) > 0 {
			time.Sleep(30 * time.Millisecond)
		}
		pending = later
	}
	emit("exit")
	return nil
}

// guardedExecWrite writes one row to guarded_log in a transaction that
// first checks the execution token with VerifyExecutionToken: "ok",
// "refused" (stale) or "error".
func guardedExecWrite(ctx context.Context, pool *pgxpool.Pool, c *sentinel.Client, key string, token int64, writer string) string {
	return guardedLogWrite(ctx, pool, func(tx pgx.Tx) error { return c.VerifyExecutionToken(ctx, tx, key, token) }, key, token, writer, nil)
}

// rerunHistory turns worker lines into operations of the fenced-lease
// model, per key.
type rerunHistory struct {
	mu  sync.Mutex
	ops []porcupine.Operation
	// fnReturn: key/token -> when fn returned (the completion's call).
	fnReturn map[string]int64
	// clients numbers the worker processes (a process is a model client);
	// raw keeps every line per key, for the report of an illegal key.
	clients map[*child]int
	raw     map[string][]string
	// open: per client, the Once call whose grant is not known yet (no
	// enter line and no result line): a process killed there may have
	// been granted a token nobody saw (see died).
	open map[int]openCall
	// granted: tokens some fn-entry line reported; named: tokens refusals
	// named (see unseen).
	granted, named map[int64]bool
}

type openCall struct {
	key  string
	call int64
}

func newRerunHistory() *rerunHistory {
	return &rerunHistory{fnReturn: map[string]int64{}, clients: map[*child]int{}, raw: map[string][]string{},
		open: map[int]openCall{}, granted: map[int64]bool{}, named: map[int64]bool{}}
}

// unseen counts the tokens that refusals named and no fn-entry line
// reported: grants to workers that died before fn began, which only the
// acquires of unknown outcome (died) explain to the model.
func (h *rerunHistory) unseen() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for tok := range h.named {
		if !h.granted[tok] {
			n++
		}
	}
	return n
}

// died records that the process of c was found dead at at (wall ns): a
// Once call it had not answered before fn began becomes an acquire of
// unknown outcome, called when the call was and returning at at. Its
// claim may have committed (a token granted that no line reports, which
// a later refusal can name) or not. It returns how many calls it closed
// (0 or 1).
func (h *rerunHistory) died(c *child, at int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	client, ok := h.clients[c]
	if !ok {
		return 0
	}
	oc, ok := h.open[client]
	if !ok {
		return 0
	}
	delete(h.open, client)
	h.add(client, lockmodel.Acquire, oc.key, 0, oc.call, lockmodel.Unknown, 0, at)
	h.raw[oc.key] = append(h.raw[oc.key], fmt.Sprintf("c%d died in its call (an acquire of unknown outcome)", client))
	return 1
}

func (h *rerunHistory) add(client int, kind lockmodel.Kind, key string, token, call int64, res lockmodel.Result, outToken, ret int64) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: client,
		Input: lockmodel.Input{Kind: kind, Key: key, Client: client, Token: token}, Call: call,
		Output: lockmodel.Output{Result: res, Token: outToken}, Return: max(ret, call)})
}

func (h *rerunHistory) line(c *child, f []string) {
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i], 10, 64); return v }
	h.mu.Lock()
	defer h.mu.Unlock()
	client, ok := h.clients[c]
	if !ok {
		client = len(h.clients) + 1
		h.clients[c] = client
	}
	if len(f) > 1 && f[0] != "start" { // f[1] is a key
		h.raw[f[1]] = append(h.raw[f[1]], fmt.Sprintf("c%d %s", client, strings.Join(f, " ")))
	}
	oc, wasOpen := h.open[client]
	switch f[0] {
	case "call", "start":
	default:
		delete(h.open, client) // the grant is known, or the call answered
	}
	switch f[0] {
	case "call": // call KEY CALL
		h.open[client] = openCall{key: f[1], call: n(2)}
	case "enter": // enter KEY TOKEN ATTEMPT CALL AT
		h.granted[n(2)] = true
		h.add(client, lockmodel.Acquire, f[1], 0, n(4), lockmodel.OK, n(2), n(5))
	case "write": // write KEY TOKEN RESULT CALL RET
		res := map[string]lockmodel.Result{"ok": lockmodel.OK, "refused": lockmodel.Refused}[f[3]]
		if f[3] == "error" {
			res = lockmodel.Unknown
		}
		h.add(client, lockmodel.Write, f[1], n(2), n(4), res, 0, n(5))
	case "fn-return": // fn-return KEY TOKEN AT
		h.fnReturn[f[1]+"/"+f[2]] = n(3)
	case "ran": // ran KEY TOKEN RET: the completion released the lease
		if at, ok := h.fnReturn[f[1]+"/"+f[2]]; ok {
			h.add(client, lockmodel.Release, f[1], n(2), at, lockmodel.OK, 0, n(3))
		}
	case "busy": // busy KEY TOKEN CALL RET
		h.named[n(2)] = true
		h.add(client, lockmodel.Acquire, f[1], 0, n(3), lockmodel.Refused, n(2), n(4))
	case "error": // error KEY MESSAGE: the claim may have committed unseen
		if wasOpen {
			h.add(client, lockmodel.Acquire, oc.key, 0, oc.call, lockmodel.Unknown, 0, wall())
		}
	}
}

func TestRerunUnderFaults(t *testing.T) {
	p := prof()
	keys, kills, pauses := 150, 30, 5
	if p.Name == "long" {
		keys, kills, pauses = 600, 150, 25
	}
	ctx := ctxT(t, 15*time.Minute)
	cl := startCluster(t, nil)
	pool := newPool(t, cl.URL(), nil)
	setupSchema(t, pool)
	_, err := pool.Exec(ctx, rerunDDL)
	require.NoError(t, err)

	hist := newRerunHistory()
	var (
		v        violations
		mu       sync.Mutex
		resolved = map[string]bool{}
		errLines []string
		// Faults armed by the driver, landed by onLine on the next line of
		// their phase from any worker: kills per phase, pauses (at enter).
		armKills           = map[string]int{}
		armPauses          int
		killed, paused     int
		killPhases         = map[string]int{}
		resumed            sync.WaitGroup
		phases             = []string{"enter", "charged", "write", "fn-return"}
		boundedKills       int
		keysKilledOrFrozen = map[string]bool{}
		// frozen: a worker paused in fn, until it finishes that call
		// (spared by the kills, so that its stale writes are seen).
		frozen = map[*child]bool{}
	)
	onLine := func(c *child, line string) {
		f := strings.Fields(line)
		if len(f) == 0 {
			return
		}
		hist.line(c, f)
		mu.Lock()
		defer mu.Unlock()
		switch f[0] {
		case "charged":
			if strings.HasPrefix(f[1], "rr-b") {
				// The bounded keys die on every attempt, after the charge.
				c.kill()
				boundedKills++
				return
			}
		case "ran", "cached", "uncertain":
			resolved[f[1]] = true
			delete(frozen, c)
		case "busy":
			delete(frozen, c)
		case "error":
			errLines = append(errLines, line)
			delete(frozen, c)
		}
		if len(f) < 2 || strings.HasPrefix(f[1], "rr-b") {
			return
		}
		switch {
		case frozen[c]:
		case f[0] == "enter" && armPauses > 0:
			// Frozen past its lease: others re-run its key meanwhile; when
			// it goes on, its writes and its completion must be refused.
			if c.signal(syscall.SIGSTOP) == nil {
				armPauses--
				paused++
				frozen[c] = true
				keysKilledOrFrozen[f[1]] = true
				resumed.Add(1)
				time.AfterFunc(3*rerunTTL, func() {
					defer resumed.Done()
					_ = c.signal(syscall.SIGCONT)
				})
			}
		case armKills[f[0]] > 0:
			armKills[f[0]]--
			c.kill()
			killed++
			killPhases[f[0]]++
			keysKilledOrFrozen[f[1]] = true
		}
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 12))
	spawned, restarts, cutShort := 0, 0, 0
	start := func(slot int) *child {
		spawned++
		name := fmt.Sprintf("w%d", slot)
		return spawn(t, name, "rerun", []string{"SF_DB=" + cl.URL(), "SF_NAME=" + name, "SF_KEYS=" + strconv.Itoa(keys),
			"SF_SEED=" + strconv.FormatUint(rng.Uint64(), 10), "SF_TTL=" + rerunTTL.String()}, onLine)
	}
	workers := make([]*child, p.CrashWorkers)
	for i := range workers {
		workers[i] = start(i)
	}
	restart := func() {
		for i, w := range workers {
			if w.hasExited() && w.exitCode() != 0 {
				cutShort += hist.died(w, wall())
				workers[i] = start(i) // killed
				restarts++
			}
		}
	}
	allResolved := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(resolved) == keys
	}
	began := time.Now()
	armedKills, armedPauses := 0, 0
	deadline := time.Now().Add(5 * time.Minute)
	for !allResolved() {
		require.True(t, time.Now().Before(deadline), "workers never resolved every key")
		time.Sleep(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		restart()
		mu.Lock()
		switch {
		case armedPauses < pauses && rng.IntN(3) == 0:
			armPauses++
			armedPauses++
		case armedKills < kills:
			armKills[phases[rng.IntN(len(phases))]]++
			armedKills++
		}
		mu.Unlock()
	}
	resumed.Wait()
	for _, w := range workers {
		select {
		case <-w.exited:
		case <-time.After(2 * time.Minute):
			t.Fatalf("worker %s did not finish; last line %q; stderr:\n%s", w.name, w.lastLine(), w.stderr.tail(20))
		}
		if strings.Contains(w.stderr.String(), "DATA RACE") {
			t.Fatalf("worker %s: data race:\n%s", w.name, w.stderr.String())
		}
		cutShort += hist.died(w, wall()) // killed after the last restart
	}
	elapsed := time.Since(began)

	// A last pass in this process settles keys whose workers went away:
	// every key ends completed, or uncertain with its attempts used up.
	driver := newClient(t, pool, sentinel.Config{DefaultTTL: rerunTTL, Owner: "driver"})
	for i := range keys {
		k := rerunKey(i)
		for {
			_, err := sentinel.Once(ctx, driver, k, func(ctx context.Context) (string, error) {
				id, err := rerunCharge(ctx, pool, k)
				return fmt.Sprintf("ch_%d", id), err
			}, sentinel.WithRerun(rerunBoundOf(k)))
			if !errors.Is(err, sentinel.ErrInProgress) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	a := auditRerun(t, ctx, pool, keys, &v)
	check := porcupine.CheckResult("")
	if len(hist.ops) > 0 {
		check = lockmodel.Check(hist.ops, 2*time.Minute)
		if check != porcupine.Ok {
			v.add("attempts' history (%d ops) is %s under the fenced-lease model", len(hist.ops), check)
			bad := lockmodel.IllegalKeys(hist.ops, time.Minute, 5)
			t.Logf("the keys the model rejects (c = worker process):\n%s", lockmodel.Explain(hist.ops, bad))
			for _, k := range bad {
				t.Logf("key %s, every worker line (times: wall ns):\n  %s", k, strings.Join(hist.raw[k], "\n  "))
			}
		}
	}
	counts := map[string]int{}
	for _, op := range hist.ops {
		in, out := op.Input.(lockmodel.Input), op.Output.(lockmodel.Output)
		counts[in.Kind.String()+"-"+out.Result.String()]++
	}
	v.require(t)
	mu.Lock()
	defer mu.Unlock()
	if len(errLines) > 0 {
		t.Logf("transient errors reported by workers (retried): %d, first: %s", len(errLines), errLines[0])
	}
	report(t, "rerun", map[string]any{
		"workers": p.CrashWorkers, "keys": keys, "processes": spawned, "kills": killed, "kill_phases": killPhases,
		"bounded_kills": boundedKills, "restarts": restarts, "keys_hit": len(keysKilledOrFrozen),
		"pauses": paused, "attempts": a.attempts, "reruns": a.reruns, "completed": a.completed,
		"double_charges": a.doubleCharges, "operator_cases": a.operatorCases, "bounded_uncertain": a.boundedUncertain,
		"provider_requests": a.requests, "stale_writes_refused": counts["write-refused"],
		"model_ops": len(hist.ops), "model_counts": counts, "calls_cut_short": cutShort, "unseen_tokens_named": hist.unseen(), "porcupine": check, "run_s": elapsed.Seconds(),
		"violations": v.count(),
	})
	require.Positive(t, a.reruns, "no key was re-run: the scenario did not test what it claims")
	if paused > 0 {
		require.Positive(t, counts["write-refused"], "no paused attempt tried a stale write: the pauses did not test fencing")
	}
}

// rerunAudit is what auditRerun counted.
type rerunAudit struct {
	attempts, reruns, completed, doubleCharges, operatorCases, boundedUncertain, requests int
}

// auditRerun checks the end state of every key against the provider and
// the history (see Scenario 12).
func auditRerun(t *testing.T, ctx context.Context, pool *pgxpool.Pool, keys int, v *violations) rerunAudit {
	t.Helper()
	var a rerunAudit
	type row struct {
		state           string
		token           int64
		attempt, bound  int
		alive           bool
		result          string
		charges         int
		chargeID        int64
		requests        int
		started, reruns []int64 // tokens, in history order
		rerunPrev       []int64 // previous_token of each rerun event
		rerunAttempt    []int
	}
	rows := map[string]*row{}
	q, err := pool.Query(ctx, `SELECT key, state, token, attempt, max_attempts, coalesce(lease_expires_at > clock_timestamp(), false),
		coalesce(convert_from(result, 'UTF8'), '') FROM sentinel.executions WHERE key LIKE 'rr-%'`)
	require.NoError(t, err)
	for q.Next() {
		var k string
		r := &row{}
		require.NoError(t, q.Scan(&k, &r.state, &r.token, &r.attempt, &r.bound, &r.alive, &r.result))
		rows[k] = r
	}
	require.NoError(t, q.Err())
	q, err = pool.Query(ctx, `SELECT once_key, count(*), min(id), sum(requests) FROM rerun_charges GROUP BY once_key`)
	require.NoError(t, err)
	for q.Next() {
		var k string
		var charges, requests int
		var id int64
		require.NoError(t, q.Scan(&k, &charges, &id, &requests))
		if r := rows[k]; r != nil {
			r.charges, r.chargeID, r.requests = charges, id, requests
		} else {
			v.add("key %s: charged (%d) with no execution", k, charges)
		}
	}
	require.NoError(t, q.Err())
	q, err = pool.Query(ctx, `SELECT key, event, token, coalesce((metadata->>'previous_token')::bigint, 0), coalesce((metadata->>'attempt')::int, 0)
		FROM sentinel.events WHERE key LIKE 'rr-%' AND event IN ('started', 'rerun') ORDER BY id`)
	require.NoError(t, err)
	for q.Next() {
		var k, ev string
		var tok, prev int64
		var attempt int
		require.NoError(t, q.Scan(&k, &ev, &tok, &prev, &attempt))
		r := rows[k]
		if r == nil {
			continue
		}
		if ev == "started" {
			r.started = append(r.started, tok)
		} else {
			r.reruns = append(r.reruns, tok)
			r.rerunPrev = append(r.rerunPrev, prev)
			r.rerunAttempt = append(r.rerunAttempt, attempt)
		}
	}
	require.NoError(t, q.Err())

	for i := range keys {
		k := rerunKey(i)
		r := rows[k]
		if r == nil {
			v.add("key %s: no execution", k)
			continue
		}
		bound := rerunBoundOf(k)
		a.attempts += len(r.started)
		a.reruns += len(r.reruns)
		a.requests += r.requests
		if r.charges > 1 {
			a.doubleCharges++
			v.add("key %s: charged %d times", k, r.charges)
		}
		if r.bound != bound {
			v.add("key %s: bound %d, want %d", k, r.bound, bound)
		}
		if r.attempt > bound || len(r.started) != r.attempt {
			v.add("key %s: attempt %d of %d, %d started events", k, r.attempt, bound, len(r.started))
		}
		if !slices.IsSorted(r.started) || len(slices.Compact(slices.Clone(r.started))) != len(r.started) {
			v.add("key %s: attempts' tokens do not increase: %v", k, r.started)
		}
		if len(r.reruns) != len(r.started)-1 {
			v.add("key %s: %d rerun events for %d attempts", k, len(r.reruns), len(r.started))
		}
		for j := range r.reruns {
			if j+1 >= len(r.started) || r.reruns[j] != r.started[j+1] || r.rerunPrev[j] != r.started[j] || r.rerunAttempt[j] != j+2 {
				v.add("key %s: rerun event %d (token %d, previous %d, attempt %d) does not follow attempts %v",
					k, j, r.reruns[j], r.rerunPrev[j], r.rerunAttempt[j], r.started)
			}
		}
		switch {
		case r.state == string(sentinel.StateCompleted):
			a.completed++
			if r.result != fmt.Sprintf(`"ch_%d"`, r.chargeID) || r.charges != 1 {
				v.add("key %s: completed with %s, but its charge is ch_%d (%d charges)", k, r.result, r.chargeID, r.charges)
			}
			if strings.HasPrefix(k, "rr-b") {
				v.add("key %s: a bounded key killed on every attempt completed (attempt %d)", k, r.attempt)
			}
		case r.state == string(sentinel.StateExecuting) && !r.alive && r.attempt >= bound:
			if strings.HasPrefix(k, "rr-b") {
				a.boundedUncertain++
			} else {
				a.operatorCases++
				v.add("key %s: uncertain after %d attempts", k, r.attempt)
			}
		default:
			v.add("key %s: left %s (alive %v) at attempt %d of %d", k, r.state, r.alive, r.attempt, bound)
		}
	}
	return a
}
