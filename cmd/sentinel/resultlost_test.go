package main

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A completed key whose result was not stored (every caller gets
// ErrResult until an operator stores it) was counted by status among the
// completed ones, with nothing to say it needs an operator, and no list
// found such keys. status now counts them apart and prints the command
// that lists them (it runs as printed), list --result-lost lists them, and
// --json says result_lost.
func TestStatusAndListShowResultsNotStored(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	_, err := sentinel.Once(ctxT(t), e.client, "pay-nan", func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	_, err = sentinel.Once(ctxT(t), e.client, "pay-ok", func(context.Context) (float64, error) { return 1, nil })
	require.NoError(t, err)

	r := e.run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "RESULT NOT STORED")
	line := findCommand(t, r.stdout, "sentinel list --result-lost")
	p := runPrinted(t, line, "")
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "pay-nan")
	require.Contains(t, p.stdout, "RESULT NOT STORED")
	require.NotContains(t, p.stdout, "pay-ok")

	r = e.run("status", "--json")
	requireCode(t, r, exitOK)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	var lost int64
	for _, c := range st.Counts {
		if c.ResultLost {
			lost += c.Count
		}
	}
	require.Equal(t, int64(1), lost, r.stdout)

	r = e.run("inspect", "pay-nan")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "RESULT NOT STORED")

	r = e.run("list", "--result-lost", "--uncertain")
	require.NotEqual(t, exitOK, r.code, "a filter that selects nothing by construction is refused")
	require.Contains(t, r.stderr, "give --result-lost (completed executions) or --uncertain (executing ones), not both")
}
