//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// A command that reads its stdin, run by lock from a terminal (sentinel in
// the terminal's foreground, the command in a process group of its own):
// the read fails at once, as under nohup, instead of stopping the command
// (SIGTTIN) for good with the lease held.
func TestCommandReadingTheTerminalDoesNotHang(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ptmx.Close(); _ = tty.Close() })
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := ptmx.Read(buf); err != nil {
				return
			}
		}
	}()
	work := filepath.Join(t.TempDir(), "work")
	cmd := exec.Command(bin, "--schema", e.schema, "lock", "job", "--", "sh", "-c",
		`if read x; then echo "read $x"; else echo "read failed"; fi > "$WORK"`)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "WORK="+work)
	out := &syncBuffer{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })

	waitUntil(t, 15*time.Second, "the command's read", func() bool { return fileHasLine(work) }, out)
	require.Equal(t, "read failed", strings.TrimSpace(readFile(t, work)))
	require.Equal(t, 0, exitCodeOf(t, cmd), "output: %s", out)
	requireCode(t, e.run("lock", "job", "--no-wait", "--", "true"), 0)
}
