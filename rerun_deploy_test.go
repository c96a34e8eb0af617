package sentinel_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// startCharge starts a child process that charges key through the
// provider (WithRerun(rerun) when rerun > 0) and stays inside fn, after
// the charge, until the test SIGKILLs it.
func startCharge(t *testing.T, e *env, key string, rerun int, ttl time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=charge", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+e.schema,
		"SENTINEL_CHILD_KEY="+key, "SENTINEL_CHILD_WHERE=inflight", "SENTINEL_CHILD_PROVIDER=dedup",
		"SENTINEL_CHILD_RERUN="+strconv.Itoa(rerun), "SENTINEL_CHILD_TTL="+ttl.String())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "INSIDE\n", line)
	return cmd
}

// waitWhileChildCharges runs Once on key in the background (counted in
// as a waiter while the child runs fn), SIGKILLs the child, and returns
// the call's error.
func waitWhileChildCharges(t *testing.T, e *env, c *sentinel.Client, cmd *exec.Cmd, fn func(context.Context) (string, error),
	opts ...sentinel.Option) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctxT(t), c, "pay", fn, append(opts, sentinel.WithWait())...)
		done <- err
	}()
	require.Eventually(t, func() bool { return e.count("executions", "key = 'pay' AND waiters > 0") == 1 },
		20*time.Second, 5*time.Millisecond, "the waiter never waited")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	return <-done
}

// A deploy adds WithRerun while a key runs in a process without it: the
// new caller, waiting for that attempt, finds it killed mid-charge and
// gets ErrUncertain; it never runs fn for an attempt nobody declared
// idempotent.
func TestRerunAddedByADeployLeavesAnEarlierAttemptUncertain(t *testing.T) {
	const ttl = 3 * time.Second // the child's lease outlives a busy machine's slow renewals
	e := newEnv(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	cmd := startCharge(t, e, "pay", 0, ttl)
	var runs atomic.Int32
	err := waitWhileChildCharges(t, e, c, cmd, p.fn(c, "pay", &runs), sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.False(t, ee.Rerun, "an operator's case")
	require.Zero(t, runs.Load())
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 1, requests)
}

// A deploy removes WithRerun while a key runs in a process with it: the
// caller without it, waiting, finds the attempt killed and gets
// ErrUncertain saying a caller with WithRerun runs it again (counted
// rerun_pending, and as RerunPending by ExecutionCounts, where an alert
// finds it); it does not run fn. A caller with the option then re-runs
// it, sending the provider the same reference: one charge.
func TestRerunRemovedByADeployLeavesTheKeyRerunPending(t *testing.T) {
	const ttl = 3 * time.Second // the child's lease outlives a busy machine's slow renewals
	e := newEnv(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	cmd := startCharge(t, e, "pay", 3, ttl)
	var runs atomic.Int32
	err := waitWhileChildCharges(t, e, c, cmd, p.fn(c, "pay", &runs))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Equal(t, sentinel.OutcomeRerunPending, sentinel.OnceOutcomeOf(false, err))
	require.ErrorContains(t, err, "a caller with WithRerun")
	require.Zero(t, runs.Load())
	counts, err := c.ExecutionCounts(ctxT(t), "default", false)
	require.NoError(t, err)
	require.Len(t, counts, 1)
	require.True(t, counts[0].RerunPending)
	require.False(t, counts[0].Uncertain)

	var ref string
	res, err := sentinel.Once(ctxT(t), c, "pay", func(ctx context.Context) (string, error) {
		ref = sentinel.EffectKey(ctx)
		require.Equal(t, 2, sentinel.Attempt(ctx))
		return p.fn(c, "pay", &runs)(ctx)
	}, sentinel.WithRerun(3))
	require.NoError(t, err)
	require.Equal(t, "ch_1", res.Value)
	require.Equal(t, sentinel.EffectKeyOf("default", "pay"), ref)
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 2, requests)
}

// After a worker process is killed mid-charge, callers in two clients
// (two owners, two pools) race to re-run the key: one attempt runs, never
// two at once, and every other caller (WithWait) gets its result.
func TestRerunRacingClientsRunOneAttempt(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	p := newProvider(t, e, true)
	killCharge(t, e, "pay", "inflight", true, 3, ttl)
	cs := []*sentinel.Client{e.client(&sentinel.Config{DefaultTTL: ttl, Owner: "a"}), e.client(&sentinel.Config{DefaultTTL: ttl, Owner: "b"})}
	waitLeaseExpired(t, cs[0], "pay")
	var running, overlap, runs atomic.Int32
	var wg sync.WaitGroup
	type outcome struct {
		res sentinel.Result[string]
		err error
	}
	results := make(chan outcome, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[i%2]
			res, err := sentinel.Once(ctxT(t), c, "pay", func(ctx context.Context) (string, error) {
				if running.Add(1) > 1 {
					overlap.Add(1)
				}
				defer running.Add(-1)
				runs.Add(1)
				time.Sleep(100 * time.Millisecond)
				return p.fn(c, "pay", nil)(ctx)
			}, sentinel.WithRerun(3), sentinel.WithWait())
			results <- outcome{res, err}
		}()
	}
	wg.Wait()
	close(results)
	ran := 0
	for o := range results {
		require.NoError(t, o.err)
		require.Equal(t, "ch_1", o.res.Value)
		if !o.res.Cached {
			ran++
		}
	}
	require.Equal(t, 1, ran)
	require.EqualValues(t, 1, runs.Load())
	require.Zero(t, overlap.Load())
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 2, requests)
}

// Two worker processes killed mid-charge use WithRerun(2)'s attempts; the
// key is uncertain. An operator reconciles and resets it: the next run is
// attempt 1 again, with the reference every earlier attempt sent, so the
// provider returns the first charge.
func TestRerunAfterAnOperatorsResetKeepsTheEffectKey(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})
	for range 2 {
		killCharge(t, e, "pay", "inflight", true, 2, ttl)
		waitLeaseExpired(t, c, "pay")
	}
	var runs atomic.Int32
	_, err := sentinel.Once(ctxT(t), c, "pay", p.fn(c, "pay", &runs), sentinel.WithRerun(2))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.ErrorContains(t, err, "attempt 2, the last WithRerun allows (2)")
	require.Zero(t, runs.Load())

	rec, err := c.Reconcile(ctxT(t), "pay")
	require.NoError(t, err)
	require.NoError(t, c.ResetToClaimed(ctxT(t), "pay", sentinel.WithToken(rec.Token)))
	var ref string
	res, err := sentinel.Once(ctxT(t), c, "pay", func(ctx context.Context) (string, error) {
		ref = sentinel.EffectKey(ctx)
		require.Equal(t, 1, sentinel.Attempt(ctx))
		return p.fn(c, "pay", &runs)(ctx)
	}, sentinel.WithRerun(2))
	require.NoError(t, err)
	require.Equal(t, rec.EffectKey(), ref)
	require.Equal(t, "ch_1", res.Value)
	charges, requests := p.charges(t, "pay")
	require.Equal(t, 1, charges)
	require.Equal(t, 3, requests)
}
