package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// runInProcess runs the command in this process against e's schema and
// returns the error its RunE returned (the one exitCode maps), for the
// checks the binary's exit code alone cannot make: what the error wraps.
func (e *env) runInProcess(args ...string) error {
	e.t.Helper()
	var out bytes.Buffer
	a := &app{stdin: &bytes.Buffer{}, stdout: &out, stderr: &out}
	root := a.rootCmd()
	root.SetArgs(append([]string{"--database-url", dbURL, "--schema", e.schema}, args...))
	root.SetOut(&out)
	root.SetErr(&out)
	_, err := root.ExecuteContextC(ctxT(e.t))
	a.close()
	return err
}

// queue lock --timeout wrapped the library's error with %v: the refusal
// kept its exit code (4), but nothing after it could tell what the wait
// ended on (errors.Is/As: the deadline, the last database error, the
// times the run's output words as its tables do), unlike lock --timeout.
// It wraps with %w now.
func TestQueueLockTimeoutWrapsTheError(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	tu, err := e.client.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = tu.Release(context.Background()) }()

	err = e.runInProcess("queue", "lock", "printer", "--timeout", "300ms", "--", "true")
	require.Equal(t, exitRefused, exitCode(err), "%v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "%v", err)
	require.Contains(t, err.Error(), "--timeout")

	// lock --timeout, for comparison, always did.
	l, err := e.client.Lease(ctxT(t), "job")
	require.NoError(t, err)
	defer func() { _ = l.Release(context.Background()) }()
	err = e.runInProcess("lock", "job", "--timeout", "300ms", "--", "true")
	require.Equal(t, exitRefused, exitCode(err), "%v", err)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}
