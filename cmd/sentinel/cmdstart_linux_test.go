//go:build linux

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A command that cannot be started exits as a shell's would: 127 when it
// is not found, 126 when it is found but cannot be executed (no execute
// permission, a directory); lock, elect and queue lock say why, and give
// the lock back at once (the next holder does not wait for the TTL).
func TestCommandThatCannotStart(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "report.sh")
	require.NoError(t, os.WriteFile(noexec, []byte("#!/bin/sh\nexit 0\n"), 0o644))
	for _, c := range []struct {
		name    string
		command string
		code    int
		says    string
	}{
		{"not-found", filepath.Join(dir, "missing"), 127, "no such file or directory"},
		{"not-in-path", "sentinel-no-such-command", 127, "executable file not found"},
		{"not-executable", noexec, 126, "permission denied"},
		{"directory", dir, 126, "permission denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.migrate()
			for _, k := range []struct {
				args []string // the command up to its options
				free []string // a command that shows the lock free
				code int      // its exit code when it is
			}{
				{[]string{"lock", "job"}, []string{"lock", "job", "--no-wait", "--", "true"}, 0},
				{[]string{"elect", "group"}, []string{"leader", "group"}, exitNotFound},
				{[]string{"queue", "lock", "printer"}, []string{"queue", "lock", "printer", "--timeout", "2s", "--", "true"}, 0},
			} {
				r := e.run(append(k.args, "--ttl", "30s", "--", c.command)...)
				requireCode(t, r, c.code)
				require.Contains(t, r.stderr, "sentinel: start "+c.command+": ", "%v", k.args)
				require.Contains(t, r.stderr, c.says, "%v", k.args)
				requireCode(t, e.run(k.free...), k.code)
			}
		})
	}
}
