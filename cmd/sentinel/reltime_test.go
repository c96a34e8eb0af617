package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// The command wrote relative times as Go durations ("700ms ago", "0s
// ago", "1m5s ago", "in 1h5m0s") and the console as "1m05s from now" and
// "just now": an operator reading both at 3 a.m. met two wordings of one
// expiry. Both now write internal/reltime's: "in 2.9s", "0.7s ago",
// "1m05s ago", "just now".
func TestRelativeTimesWordedAsTheConsole(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := sentinel.Once(ctxT(t), e.client, "charge-1", func(context.Context) (int, error) {
			close(inside)
			<-release
			return 1, nil
		}, sentinel.WithTTL(30*time.Second))
		done <- err
	}()
	t.Cleanup(func() { close(release); <-done })
	<-inside
	time.Sleep(300 * time.Millisecond)
	r := e.run("inspect", "charge-1")
	requireCode(t, r, exitOK)
	since := regexp.MustCompile(`since:\s+\S+ \S+\s+\(([^)]*)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, since, r.stdout)
	require.Regexp(t, `^\d\.\ds ago$`, since[1], "since, in tenths of a second: %s", r.stdout)
	lease := regexp.MustCompile(`lease expires:\s+\S+ \S+\s+\(([^)]*)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, lease, r.stdout)
	require.Regexp(t, `^in \d\ds`, lease[1], r.stdout)

	l, err := e.client.Lease(ctxT(t), "nightly", sentinel.WithTTL(30*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	r = e.run("leases", "-A")
	requireCode(t, r, exitOK)
	require.Regexp(t, `\(in \d\ds\)`, r.stdout)
}
