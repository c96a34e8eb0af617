package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// force-complete or reset of a key still uncertain (executing, its lease
// expired: not reconciled yet) was refused with "ForceComplete requires
// state reconciling, the key is executing" and no way on. The refusal
// (exit 4, nothing changed) now says to reconcile first, with the command
// line, which runs as printed.
func TestStoreOnAnUncertainKeySaysReconcileFirst(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	_, err := sentinel.Once(ctxT(t), pay, "order-1", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.Error(t, err)
	want := "sentinel reconcile order-1 -n payments --token 1 --schema " + e.schema
	for _, args := range [][]string{
		{"force-complete", "order-1", "5", "-n", "payments", "--yes"},
		{"reset", "order-1", "-n", "payments", "--yes"},
	} {
		r := e.run(args...)
		requireCode(t, r, exitRefused)
		require.Contains(t, r.stderr, "reconcile it first", "%v", args)
		require.Contains(t, r.stderr, "\n  "+want+"\n", "%v", args)
	}
	r := runBin(t, []string{"DATABASE_URL=" + dbURL}, nil, append(strings.Fields(strings.TrimPrefix(want, "sentinel ")), "--yes")...)
	requireCode(t, r, exitOK)
	require.Regexp(t, regexp.MustCompile(`is reconciling, token 2`), r.stdout+r.stderr)
}
