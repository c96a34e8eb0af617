package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// rfc3339 matches a time as the library's error texts print it
// (2026-11-29T03:14:49.302345Z).
var rfc3339 = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d`)

// cliTime matches a time as the command's tables print it, with how far
// it is from now: 2026-11-29 03:14:49.302Z (in 4m59s).
var cliTime = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z \((in [0-9.hmsd]+|just now|[0-9.hmsd]+ ago)\)`)

// A refusal of the library that carries a time (the executor's lease of
// a key reconcile refused, the holder's expiry of a lease lock did not
// get) printed the library's text as is: "lease until
// 2026-11-29T03:38:15.556667Z", where inspect and leases print
// "2026-11-29 03:38:15.556Z (in 3.0s)". The command now words the times
// of those errors as its tables do.
func TestRefusalsWordTimesAsTables(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	started := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = sentinel.Once(context.Background(), e.client, "busy", func(context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		}, sentinel.WithTTL(5*time.Minute))
	}()
	<-started
	defer func() { close(release); <-done }()

	l, err := e.client.Lease(ctxT(t), "job", sentinel.WithTTL(5*time.Minute))
	require.NoError(t, err)
	defer func() { _ = l.Release(context.Background()) }()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"reconcile", "busy", "--yes"}, "lease until "},
		{[]string{"lock", "job", "--no-wait", "--", "true"}, "held by "},
		{[]string{"lock", "job", "--timeout", "1s", "--", "true"}, "last holder"},
	} {
		r := e.run(tc.args...)
		requireCode(t, r, exitRefused)
		require.Contains(t, r.stderr, tc.want, "%q", tc.args)
		require.NotRegexp(t, rfc3339, r.stderr, "%q", tc.args)
		require.Regexp(t, cliTime, r.stderr, "%q", tc.args)
	}
}
