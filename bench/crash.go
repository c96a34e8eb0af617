package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/sentinel-coordination/sentinel"
)

// The crash table: a worker process runs a payment and is SIGKILLed either
// while its charge is in flight (the provider charged; the worker dies
// before fn returns) or after fn returned (before the library recorded the
// outcome). The payment is then retried as each library documents, in a
// restarted worker process, and the provider's table tells how many times
// the customer was charged. Two providers: a plain one that charges every
// request, and one that honours an idempotency key (one charge per
// reference; a repeat gets the first charge back), as card APIs do.

// Kill points.
const (
	killInFlight    = "in flight"    // the provider charged; the worker dies before fn returns
	killAfterReturn = "after return" // fn returned; the worker dies before the library records it
)

// Providers.
const (
	providerPlain      = "plain"      // charges every request
	providerIdempotent = "idempotent" // one charge per reference
)

const (
	crashChildEnv   = "SENTINEL_BENCH_CRASH_CHILD"  // the crash mode's lib, in a worker process
	crashConfigEnv  = "SENTINEL_BENCH_CRASH_CONFIG" // its crashConfig, as JSON
	crashAppName    = "sentinel-bench-crash"        // DBOS's application name in the workers
	crashDBOSSchema = "dbos_crash"                  // DBOS's schema in the workers
)

func init() {
	// A worker of the crash table: this binary (or the test binary)
	// re-executed with crashChildEnv set.
	if lib := os.Getenv(crashChildEnv); lib != "" {
		os.Exit(runCrashChild(lib))
	}
}

// crashMode is a library as its documentation says to use it for "run this
// payment exactly once", and how a payment is retried after a crash.
type crashMode struct {
	lib   string // the worker's code path
	name  string
	retry string
}

func crashModes() []crashMode {
	return []crashMode{
		{lib: "sentinel", name: "sentinel.Once",
			retry: "the restarted worker calls Once again with the same key and WithWait (it waits for the dead executor's lease to expire, then gets the outcome); the provider reference is the payment key"},
		{lib: "sentinel-rerun", name: "sentinel.Once + WithRerun(3)",
			retry: "as sentinel.Once, with WithRerun(3): after the lease expires the restarted worker runs fn again (attempt 2) instead of getting ErrUncertain; the provider reference is sentinel.EffectKey(ctx), the same on every attempt"},
		{lib: "dbos", name: nameDBOS + " " + dbosVersion,
			retry: "the restarted worker (same executor ID and application version) launches DBOS, whose recovery resumes the pending workflow, and calls RunWorkflow with the same workflow ID and GetResult; the provider reference is the workflow ID"},
	}
}

// crashConfig is what a worker needs.
type crashConfig struct {
	URL          string        `json:"url"`
	Schema       string        `json:"schema"`        // Sentinel's tables and the provider's
	DBOSDatabase string        `json:"dbos_database"` // DBOS's system database
	Key          string        `json:"key"`
	Kill         string        `json:"kill"` // "": run to the end (the retry)
	Provider     string        `json:"provider"`
	TTL          time.Duration `json:"ttl"`
}

// crashSettings are the section's settings, with defaults for a zero value
// (the smoke test builds options by hand).
func (o options) crashSettings() (trials int, ttl time.Duration) {
	trials, ttl = o.crashTrials, o.crashTTL
	if trials == 0 {
		trials = 1
	}
	if ttl == 0 {
		ttl = time.Second
	}
	return trials, ttl
}

// crashCell is one library, kill point and provider over all its trials.
type crashCell struct {
	mode     crashMode
	kill     string
	provider string
	trials   int
	twice    int // trials in which the customer was charged more than once
	operator int // trials left for an operator (the library reported the outcome unknown)
	success  int // trials the library reported as a success
	other    []string
	requests int    // charge requests that reached the provider, all trials
	toResult sample // from the kill to the retry's outcome
}

type crashSection struct {
	ttl   time.Duration
	cells []*crashCell
}

func (s *crashSection) cell(lib, kill, provider string) *crashCell {
	if s == nil {
		return nil
	}
	for _, c := range s.cells {
		if c.mode.lib == lib && c.kill == kill && c.provider == provider {
			return c
		}
	}
	return nil
}

const providerDDL = `CREATE TABLE IF NOT EXISTS %[1]s.provider_charges (
    id bigserial PRIMARY KEY, payment text NOT NULL, ref text NOT NULL,
    idempotent boolean NOT NULL, requests integer NOT NULL DEFAULT 1);
CREATE UNIQUE INDEX IF NOT EXISTS provider_charges_ref ON %[1]s.provider_charges (ref) WHERE idempotent;`

// chargeSQL is the provider's charge: a new charge per request (plain), or
// one per reference, a repeat getting the first charge back (idempotent).
func chargeSQL(schema, provider string) string {
	t := pgx.Identifier{schema, "provider_charges"}.Sanitize()
	if provider == providerIdempotent {
		return `INSERT INTO ` + t + ` AS c (payment, ref, idempotent) VALUES ($1, $2, true)
ON CONFLICT (ref) WHERE idempotent DO UPDATE SET requests = c.requests + 1 RETURNING id`
	}
	return `INSERT INTO ` + t + ` (payment, ref, idempotent) VALUES ($1, $2, false) RETURNING id`
}

// crashBench runs the section: every library, kill point and provider,
// trials interleaved (trial i of every cell before trial i+1 of any).
func (b *bench) crashBench(ctx context.Context) (*crashSection, error) {
	trials, ttl := b.opts.crashSettings()
	if _, err := b.admin.Exec(ctx, fmt.Sprintf(providerDDL, pgx.Identifier{b.schema}.Sanitize())); err != nil {
		return nil, err
	}
	db, err := b.dbosDatabase(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.migrateDBOS(ctx, db); err != nil {
		return nil, err
	}
	sec := &crashSection{ttl: ttl}
	for _, m := range crashModes() {
		for _, kill := range []string{killInFlight, killAfterReturn} {
			for _, p := range []string{providerPlain, providerIdempotent} {
				sec.cells = append(sec.cells, &crashCell{mode: m, kill: kill, provider: p})
			}
		}
	}
	base := crashConfig{URL: b.url, Schema: b.schema, DBOSDatabase: db, TTL: ttl}
	for i := range trials {
		for k := range sec.cells {
			if i%2 == 1 {
				k = len(sec.cells) - 1 - k
			}
			c := sec.cells[k]
			cfg := base
			cfg.Key = "pay-" + uuid.NewString()
			cfg.Kill, cfg.Provider = c.kill, c.provider
			if err := b.crashTrial(ctx, c, cfg); err != nil {
				return nil, fmt.Errorf("%s, %s, %s provider: %w", c.mode.name, c.kill, c.provider, err)
			}
		}
		b.progress("crash table: trial %d/%d of each of %d cells done", i+1, trials, len(sec.cells))
	}
	return sec, nil
}

// migrateDBOS creates DBOS's tables for the workers once, so no trial pays
// for it.
func (b *bench) migrateDBOS(ctx context.Context, db string) error {
	pool, err := newPoolIn(ctx, b.url, db, 2, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	a, err := newDBOSContext(ctx, pool, crashAppName+"-setup", crashDBOSSchema, b.logw)
	if err != nil {
		return fmt.Errorf("DBOS migrations: %w", err)
	}
	return shutdownDBOS(a)
}

// crashTrial runs one payment to its kill, retries it in a new worker and
// adds the outcome to c.
func (b *bench) crashTrial(ctx context.Context, c *crashCell, cfg crashConfig) error {
	first, err := startWorker(c.mode.lib, cfg)
	if err != nil {
		return err
	}
	defer first.stop()
	want := "charged"
	if cfg.Kill == killAfterReturn {
		want = "returned"
	}
	if line, err := first.next(ctx, time.Minute); err != nil || line != want {
		return fmt.Errorf("worker said %q (%v), want %q; its stderr:\n%s", line, err, want, first.stderr())
	}
	killed := time.Now()
	first.stop()

	cfg.Kill = ""
	retry, err := startWorker(c.mode.lib, cfg)
	if err != nil {
		return err
	}
	defer retry.stop()
	line, err := retry.next(ctx, 2*time.Minute)
	if err != nil {
		return fmt.Errorf("retry: %v; its stderr:\n%s", err, retry.stderr())
	}
	took := time.Since(killed)
	var charges, requests int
	if err := b.admin.QueryRow(ctx, "SELECT count(*), coalesce(sum(requests), 0) FROM "+
		pgx.Identifier{b.schema, "provider_charges"}.Sanitize()+" WHERE payment = $1", cfg.Key).Scan(&charges, &requests); err != nil {
		return err
	}
	c.trials++
	c.requests += requests
	if charges > 1 {
		c.twice++
	}
	switch outcome := strings.TrimPrefix(line, "result "); outcome {
	case "ok":
		c.success++
	case "uncertain":
		c.operator++
	default:
		c.other = append(c.other, outcome)
	}
	c.toResult.add(sample{ops: 1, lat: []time.Duration{took}})
	return nil
}

// worker is a crash-table worker process.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	errb  *lockedBuffer
	once  sync.Once
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startWorker(lib string, cfg crashConfig) (*worker, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return startProcess(crashChildEnv+"="+lib, crashConfigEnv+"="+string(js))
}

// startProcess starts this binary (or the test binary) again with env
// added, as a worker whose stdout lines the parent reads.
func startProcess(env ...string) (*worker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := &worker{cmd: exec.Command(self, "-test.run=^$"), lines: make(chan string, 16), errb: &lockedBuffer{}}
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	w.cmd.Stderr = w.errb
	if w.stdin, err = w.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	return w, nil
}

// next returns the worker's next line of output.
func (w *worker) next(ctx context.Context, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-w.lines:
		if !ok {
			return "", errors.New("the worker exited")
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("no word from the worker within %s", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop SIGKILLs the worker and reaps it.
func (w *worker) stop() {
	w.once.Do(func() {
		_ = w.cmd.Process.Signal(syscall.SIGKILL)
		_ = w.cmd.Wait()
		_ = w.stdin.Close()
	})
}

// finish closes the worker's stdin, which asks it to stop, and waits for
// it to exit; after timeout it is SIGKILLed.
func (w *worker) finish(timeout time.Duration) {
	w.once.Do(func() {
		_ = w.stdin.Close()
		done := make(chan struct{})
		go func() { _ = w.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
			_ = w.cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	})
}

func (w *worker) stderr() string { return w.errb.String() }

// --- the worker process ------------------------------------------------------

// say writes a line for the parent.
func say(line string) { fmt.Fprintln(os.Stdout, line) }

// hang blocks the calling goroutine until the process is killed.
func hang() {
	for {
		time.Sleep(time.Hour)
	}
}

// gate is a query tracer that, once armed (fn returned), tells the parent
// and stops the first statement the library sends after fn: the one that
// would record the outcome. The parent then kills the process.
type gate struct {
	armed atomic.Bool
	once  sync.Once
}

func (g *gate) check() {
	if g.armed.Load() {
		g.once.Do(func() { say("returned") })
		hang()
	}
}

func (g *gate) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	g.check()
	return ctx
}

func (g *gate) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (g *gate) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	g.check()
	return ctx
}

func (g *gate) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (g *gate) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// runCrashChild is a worker: it runs the payment of the configured key with
// lib and prints "charged" or "returned" where it is to be killed, or
// "result ok|uncertain|error ..." at the end.
func runCrashChild(lib string) int {
	var cfg crashConfig
	if err := json.Unmarshal([]byte(os.Getenv(crashConfigEnv)), &cfg); err != nil {
		say("result error " + err.Error())
		return 2
	}
	go func() { // the parent is gone: stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prov, err := newPool(ctx, cfg.URL, 2, nil) // the provider: another service
	if err != nil {
		say("result error " + err.Error())
		return 1
	}
	g := &gate{}
	charge := func(ctx context.Context, ref string) (receipt, error) {
		var id int64
		if err := prov.QueryRow(ctx, chargeSQL(cfg.Schema, cfg.Provider), cfg.Key, ref).Scan(&id); err != nil {
			return receipt{}, err
		}
		switch cfg.Kill {
		case killInFlight:
			say("charged")
			hang()
		case killAfterReturn:
			g.armed.Store(true)
		}
		return receipt{ID: fmt.Sprintf("ch_%d", id), Amount: 9900}, nil
	}
	switch lib {
	case "sentinel":
		err = crashSentinel(ctx, cfg, g, charge)
	case "sentinel-rerun":
		err = crashSentinel(ctx, cfg, g, charge, sentinel.WithRerun(3))
	case "dbos":
		err = crashDBOS(ctx, cfg, g, charge)
	default:
		err = fmt.Errorf("unknown library %q", lib)
	}
	switch {
	case err == nil:
		say("result ok")
	case errors.Is(err, sentinel.ErrUncertain):
		say("result uncertain")
	default:
		say("result error " + strings.Join(strings.Fields(err.Error()), " "))
	}
	return 0
}

// crashSentinel pays with Once; the reference is the payment key.
func crashSentinel(ctx context.Context, cfg crashConfig, g *gate, charge func(context.Context, string) (receipt, error), opts ...sentinel.Option) error {
	pool, err := newPool(ctx, cfg.URL, 4, g)
	if err != nil {
		return err
	}
	c, err := sentinel.New(pool, &sentinel.Config{Schema: cfg.Schema})
	if err != nil {
		return err
	}
	ref := func(ctx context.Context) string { return cfg.Key }
	if len(opts) > 0 { // WithRerun: the reference the provider deduplicates by
		ref = sentinel.EffectKey
	}
	opts = append([]sentinel.Option{sentinel.WithTTL(cfg.TTL), sentinel.WithHardTTL(time.Minute), sentinel.WithWait()}, opts...)
	_, err = sentinel.Once(ctx, c, cfg.Key, func(ctx context.Context) (receipt, error) { return charge(ctx, ref(ctx)) }, opts...)
	return err
}

// crashDBOS pays with a DBOS workflow whose ID is the payment key.
func crashDBOS(ctx context.Context, cfg crashConfig, g *gate, charge func(context.Context, string) (receipt, error)) error {
	pool, err := newPoolIn(ctx, cfg.URL, cfg.DBOSDatabase, 4, g)
	if err != nil {
		return err
	}
	a, err := newDBOSApp(ctx, pool, crashAppName, crashDBOSSchema, os.Stderr, charge)
	if err != nil {
		return err
	}
	_, err = a.run(cfg.Key)
	return err
}
