package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// reconcile, force-complete and reset set a key's owner to the operator
// (NAME/sentinel-PID) but kept the crashed worker's host and pid, so
// inspect and list showed the operator on the worker's host with the
// worker's pid. The row now names the operator's own process (the CLI's
// host and pid, the pid its owner name carries), and inspect still says
// where the stopped attempt ran, from the reconciling event's history
// (previous_owner, previous_host, previous_pid), as history does.
func TestOperatorTakeoverNamesTheOperatorsProcess(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	worker, err := sentinel.New(p, &sentinel.Config{Schema: e.schema, Namespace: "payments",
		Owner: "worker-a", Host: "worker-7.example", PID: 4242})
	require.NoError(t, err)
	t.Cleanup(worker.Close)
	_, err = sentinel.Once(ctxT(t), worker, "order-1", func(context.Context) (int, error) {
		return 0, errors.New("the payment provider timed out")
	})
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	host, err := os.Hostname()
	require.NoError(t, err)

	requireCode(t, e.run("reconcile", "order-1", "-n", "payments", "--operator", "alice", "--yes"), exitOK)
	r := e.run("inspect", "order-1", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var ex execJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ex))
	m := regexp.MustCompile(`^alice/sentinel-(\d+)$`).FindStringSubmatch(ex.Owner)
	require.NotNil(t, m, ex.Owner)
	require.Equal(t, host, ex.Host, "the operator's host, not the worker's")
	require.Equal(t, m[1], strconv.Itoa(ex.PID), "the pid in the operator's name, not the worker's")

	r = e.run("inspect", "order-1", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Regexp(t, `owner:\s+alice/sentinel-`+m[1]+` \(host `+regexp.QuoteMeta(host)+`, pid `+m[1]+`\)`, r.stdout)
	require.Regexp(t, `taken from:\s+worker-a \(host worker-7\.example, pid 4242\), token 1, by reconcile at `, r.stdout)
	require.NotContains(t, r.stdout, "hard expiry:", "the worker's hard expiry bounded its lease: nothing happens at it now")

	r = e.run("list", "-n", "payments")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "worker-7.example", "list shows the row's process: the operator's")
	require.NotContains(t, r.stdout, "4242")

	r = e.run("history", "order-1", "-n", "payments", "--json")
	requireCode(t, r, exitOK)
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs))
	rec := evs[len(evs)-1]
	require.Equal(t, "reconciling", rec.Type)
	require.Equal(t, "worker-a", rec.Metadata["previous_owner"])
	require.Equal(t, "worker-7.example", rec.Metadata["previous_host"])
	require.EqualValues(t, 4242, rec.Metadata["previous_pid"])

	// force-complete: the row is the second operator's; inspect still
	// says where the attempt ran.
	requireCode(t, e.run("force-complete", "order-1", "5", "-n", "payments", "--operator", "bob", "--yes"), exitOK)
	r = e.run("inspect", "order-1", "-n", "payments")
	requireCode(t, r, exitOK)
	m = regexp.MustCompile(`owner:\s+bob/sentinel-(\d+) \(host ` + regexp.QuoteMeta(host) + `, pid (\d+)\)`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	require.Equal(t, m[1], m[2])
	require.NotContains(t, r.stdout, "hard expiry:")
	require.Regexp(t, `taken from:\s+worker-a \(host worker-7\.example, pid 4242\), token 1, by reconcile at `, r.stdout)
}
