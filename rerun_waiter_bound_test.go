package sentinel_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A WithWait caller whose own WithRerun bound the key's attempts reached,
// waiting for an attempt whose process is killed, got an error that said
// both "no operator is needed" (the first line of a key to be re-run) and
// "otherwise an operator must Reconcile it": whoever read it could not
// tell whether to page someone. It now says one thing: a caller with a
// higher WithRerun runs the key again, no operator being needed unless
// none comes.
func TestRerunWaiterPastItsBoundIsToldOneThing(t *testing.T) {
	const ttl = time.Second
	e := newEnv(t)
	ctx := ctxT(t)
	p := newProvider(t, e, true)
	c := e.client(&sentinel.Config{DefaultTTL: ttl})

	// Attempt 1 of 3 fails: the key waits for a caller with WithRerun.
	_, err := sentinel.Once(ctx, c, "pay", func(context.Context) (string, error) {
		return "", errors.New("provider timed out")
	}, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)

	// Attempt 2 runs in a worker process, which is killed in flight.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=charge", "SENTINEL_CHILD_DB="+dbURL, "SENTINEL_CHILD_SCHEMA="+e.schema,
		"SENTINEL_CHILD_KEY=pay", "SENTINEL_CHILD_WHERE=inflight", "SENTINEL_CHILD_PROVIDER=dedup",
		"SENTINEL_CHILD_RERUN=3", "SENTINEL_CHILD_TTL="+ttl.String())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "INSIDE\n", line)

	// A caller with WithRerun(2) waits for it; attempt 2 is its last.
	done := make(chan error, 1)
	var runs atomic.Int32
	go func() {
		_, err := sentinel.Once(ctx, c, "pay", p.fn(c, "pay", &runs), sentinel.WithWait(), sentinel.WithRerun(2))
		done <- err
	}()
	require.Eventually(t, func() bool { return e.count("executions", "key = 'pay' AND waiters > 0") == 1 },
		20*time.Second, 5*time.Millisecond, "the waiter never waited")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	err = <-done
	t.Log(err)
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	require.Zero(t, runs.Load(), "fn ran past the caller's bound")
	var ee *sentinel.ExecutionError
	require.ErrorAs(t, err, &ee)
	require.True(t, ee.Rerun, "a caller with a higher bound runs it again")
	msg := err.Error()
	require.Contains(t, msg, "no re-run is left")
	require.Contains(t, msg, "WithRerun(2)")
	require.Contains(t, msg, "WithRerun above 2 runs it again")
	require.NotContains(t, msg, "must Reconcile", "told a person to act on a key a caller runs again")
	require.NotContains(t, msg, "(no operator is needed)", "told nobody is needed though this caller will not run it")
}
