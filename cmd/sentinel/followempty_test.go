package main

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// `sentinel follow` with no -n follows namespace "default": with every
// execution in "payments" it said "following namespace "default"" and
// then nothing, for as long as the operator watched. It now notes at once
// that "default" has no executions and which namespaces have, each with
// the same command there, which runs as printed.
func TestFollowOfAnEmptyNamespaceSaysWhereExecutionsAre(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	_, err := sentinel.Once(ctxT(t), pay, "order-1", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--schema", e.schema, "follow", "--after", "0", "--count", "1")
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "following") {
			break
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	out := strings.Join(lines, "\n")
	require.Contains(t, out, `namespace "default" has no executions`, out)
	want := "sentinel follow --after 0 --count 1 --namespace payments --schema " + e.schema
	require.Contains(t, out, "\n  "+want+"\n", out)

	r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, strings.Fields(strings.TrimPrefix(want, "sentinel "))...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "payments/order-1")
	require.NotContains(t, r.stderr, "has no executions")
}

// `sentinel queue follow` with no -n followed namespace "default": with
// every queue in "office" it said "following every queue in namespace
// "default"" and then nothing, for as long as the operator watched. It now
// notes at once that "default" has no queues and which namespaces have,
// each with the same command there (runnable as printed), and keeps
// following "default": a queue created there later still shows.
func TestQueueFollowOfAnEmptyNamespaceSaysWhereQueuesAre(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	office := e.newClient("office")
	tu, err := office.Turn(ctxT(t), "printer", sentinel.WithLabel("report"))
	require.NoError(t, err)
	require.NoError(t, tu.Release(ctxT(t)))

	ctx, cancel := context.WithTimeout(ctxT(t), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--schema", e.schema, "queue", "follow", "--after", "0", "--count", "1")
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	var stdout syncBuffer
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill() }()
	var lines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.HasPrefix(sc.Text(), "following") {
			break
		}
	}
	out := strings.Join(lines, "\n")
	require.Contains(t, out, `namespace "default" has no queues yet`, out)
	want := "sentinel queue follow --after 0 --count 1 --namespace office --schema " + e.schema
	require.Contains(t, out, "\n  "+want+"\n", out)
	require.Contains(t, out, "\n  sentinel queue follow --after 0 --count 1 --all-namespaces --schema "+e.schema+"\n", out)

	// Still following "default" (from its first event: --after 0): its
	// first queue's message ends it.
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	tu, err = e.client.Turn(ctxT(t), "scanner", sentinel.WithLabel("scan"))
	require.NoError(t, err)
	require.NoError(t, tu.Release(ctxT(t)))
	require.NoError(t, cmd.Wait())
	require.Contains(t, stdout.String(), "scanner:")

	r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, strings.Fields(strings.TrimPrefix(want, "sentinel "))...)
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "printer:")
	require.NotContains(t, r.stderr, "has no queues")
}
