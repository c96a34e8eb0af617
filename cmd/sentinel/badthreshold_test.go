package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A threshold of 0 or less is refused by every command that takes it, and
// the refusal quoted it in Go's form ("--rerun-pending-after -5m0s",
// "--reconciling-after -1h30m0s"), not as the operator typed it. It now
// quotes it as typed, as every other duration the commands print.
func TestBadThresholdQuotedAsTyped(t *testing.T) {
	for _, c := range [][]string{
		{"status", "--exit-code"}, {"list"}, {"inspect", "k"}, {"idempotency", "list"}, {"idempotency", "inspect", "k"}, {"serve", "--read-only"},
	} {
		r := runBin(t, nil, nil, append(c, "--rerun-pending-after", "-5m")...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "--rerun-pending-after -5m: give a duration of more than 0 (such as 15m)", "%v", c)
	}
	r := runBin(t, nil, nil, "status", "--exit-code", "--reconciling-after", "-90m")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "--reconciling-after -1h30m: give a duration of more than 0 (such as 1h)")
	r = runBin(t, nil, nil, "list", "--older-than", "-10m")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "--older-than -10m: give a duration of more than 0")
}
