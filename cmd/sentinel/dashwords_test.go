package main

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// A key that reads as a flag (a Once key "-7 o'clock", an Idempotency-Key
// starting with "-", as one base64url key in 64 does) and a value that
// does (fn's result -500) stay runnable in every command printed for them,
// from the application's error through inspect, reconcile, force-complete,
// reset and idempotency resolve: cobra would read them as flags ("unknown
// shorthand flag"), so they go after "--".
func TestPrintedCommandsWithWordsThatReadAsFlags(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")

	// A Once key: the application's error names inspect, inspect names
	// reconcile, reconcile names force-complete and reset.
	const key = "-7 o'clock"
	_, err := sentinel.Once(ctxT(t), pay, key, func(context.Context) (int, error) {
		return 0, errors.New("the payment provider timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, look, ok := strings.Cut(err.Error(), "; to look: ")
	require.True(t, ok, err.Error())
	inspected := runPrinted(t, look, "")
	requireCode(t, inspected, exitOK)
	rec := runPrinted(t, findCommand(t, inspected.stdout, "sentinel reconcile"), "y\n")
	requireCode(t, rec, exitOK)
	require.Contains(t, rec.stdout, "is reconciling")
	fc := runPrinted(t, findCommand(t, rec.stdout, "sentinel force-complete"), "42\ny\n")
	requireCode(t, fc, exitOK)
	got, err := sentinel.Once(ctxT(t), pay, key, func(context.Context) (int, error) { return 0, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, 42, got.Value)

	// fn returned -500, but its completion was refused: the value printed
	// in force-complete reads as a flag too.
	_, err = sentinel.Once(ctxT(t), pay, "refund-1", func(ctx context.Context) (int, error) {
		started := time.Now()
		<-ctx.Done() // the hard TTL ends the lease while fn works
		time.Sleep(time.Until(started.Add(500 * time.Millisecond)))
		return -500, nil
	}, sentinel.WithTTL(300*time.Millisecond), sentinel.WithHardTTL(300*time.Millisecond))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	r := e.run("reconcile", "refund-1", "-n", "payments", "--yes")
	requireCode(t, r, exitOK)
	complete := findCommand(t, r.stdout, "sentinel force-complete")
	require.Contains(t, complete, "-500")
	requireCode(t, runPrinted(t, complete, "y\n"), exitOK)
	got, err = sentinel.Once(ctxT(t), pay, "refund-1", func(context.Context) (int, error) { return 0, errors.New("must not run") })
	require.NoError(t, err)
	require.Equal(t, -500, got.Value)

	// A reset as printed, for a key that reads as a flag.
	_, err = sentinel.Once(ctxT(t), pay, "-k2", func(context.Context) (int, error) { return 0, errors.New("timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	r = e.run("reconcile", "-n", "payments", "--yes", "--", "-k2")
	requireCode(t, r, exitOK)
	requireCode(t, runPrinted(t, findCommand(t, r.stdout, "sentinel reset"), "y\n"), exitOK)

	// An Idempotency-Key: the middleware's problem names inspect, which
	// names resolve; idempotency list names inspect.
	s := newShop(e, "payments")
	const ikey, body = "-Xk3vQ9", `{"amount":500}`
	hr := s.post(t, "cus_1", ikey, body)
	require.Equal(t, idempotency.ProblemUncertain, hr.problem.Type)
	m := regexp.MustCompile(`\((sentinel idempotency inspect [^)]*)\)`).FindStringSubmatch(hr.problem.Detail)
	require.NotNil(t, m, hr.problem.Detail)
	inspected = runPrinted(t, m[1], "")
	requireCode(t, inspected, exitOK)
	require.Contains(t, inspected.stdout, "UNCERTAIN")
	out := e.run("idempotency", "list", "--uncertain")
	requireCode(t, out, exitOK)
	requireCode(t, runPrinted(t, findCommand(t, out.stdout, "sentinel idempotency inspect"), ""), exitOK)
	res := runPrinted(t, findCommand(t, inspected.stdout, "sentinel idempotency resolve"),
		"201\n\n{\"charge_id\":\"ch_1\"}\n\ny\n")
	requireCode(t, res, exitOK)
	hr = s.post(t, "cus_1", ikey, body)
	require.Equal(t, http.StatusCreated, hr.status, hr.body)
	require.Equal(t, `{"charge_id":"ch_1"}`, hr.body)
}

// A lease KEY or election GROUP that reads as a flag goes after a first
// "--", the command after a second: `lock -- -k -- CMD` runs CMD (it ran
// "--" as the command, exit 127), and so does the command line lock
// prints for that key in another namespace.
func TestLockAndElectNamesThatReadAsFlagsRunTheCommand(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	l, err := e.newClient("jobs").Lease(ctxT(t), "-k")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctxT(t)))

	r := e.run("lock", "--", "-k", "--", "sh", "-c", `echo "$SENTINEL_LEASE_NAMESPACE $SENTINEL_LEASE_KEY"`)
	requireCode(t, r, exitOK)
	require.Equal(t, "default -k\n", r.stdout)
	printed := runPrinted(t, findCommand(t, r.stderr, "sentinel lock"), "")
	requireCode(t, printed, exitOK)
	require.Contains(t, printed.stdout, "jobs -k")

	r = e.run("elect", "--", "-g", "--", "sh", "-c", `echo "term $SENTINEL_ELECTION_GROUP"`)
	requireCode(t, r, exitOK)
	require.Equal(t, "term -g\n", r.stdout)
}
