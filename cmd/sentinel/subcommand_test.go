package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An unknown subcommand is a usage error (exit 2) under every command
// that groups others, as at the top level: `sentinel idempotency lsit
// --uncertain` printed the help and exited 0, which a script reads as
// success. The group alone still shows its help.
func TestUnknownSubcommandIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"no-such-command"},
		{"idempotency", "lsit"},
		{"idempotency", "lsit", "--json"},
		{"queue", "statsu"},
		{"migrate", "statsu"},
	} {
		r := runBin(t, nil, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:", "%v", args)
		require.NotContains(t, r.stdout, "Available Commands", "%v", args)
	}
	for _, args := range [][]string{{"idempotency"}, {"queue"}} {
		r := runBin(t, nil, nil, args...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, "Available Commands", "%v", args)
	}
}
