//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The command run by lock, elect and queue lock and everything it starts
// stop before the lock can pass to another holder: on SIGTERM to
// sentinel, on SIGKILL of sentinel, and when the lease is lost because
// renewals cannot reach the database. The command starts a grandchild
// that writes a timestamp to a file every 50ms; a second sentinel waits
// on the same lock and runs a command that writes its start time.
func TestCommandTreeDiesBeforeTheNextHolder(t *testing.T) {
	kinds := []struct {
		name  string
		args  []string // the command up to "--"
		table string   // the table whose renewals the lost case blocks
	}{
		{"lock", []string{"lock", "job"}, "leases"},
		{"elect", []string{"elect", "group"}, "leaders"},
		{"queue-lock", []string{"queue", "lock", "printer"}, "tickets"},
	}
	for _, k := range kinds {
		for _, how := range []string{"sigterm", "sigkill", "lost"} {
			t.Run(k.name+"/"+how, func(t *testing.T) {
				e := newEnv(t)
				e.migrate()
				dir := t.TempDir()
				work, second := filepath.Join(dir, "work"), filepath.Join(dir, "second")
				const ttl = 2 * time.Second
				first, firstErr := startBin(t, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
					append(append([]string{"--schema", e.schema}, k.args...),
						"--ttl", ttl.String(), "--kill-after", "5s", "--", "sh", "-c", writerScript)...)
				waitUntil(t, 20*time.Second, "the first command's grandchild", func() bool { return fileHasLine(work) }, firstErr)
				require.True(t, treeAlive(work))

				// The second holder's TTL is longer: in the lost case its
				// acquire may wait behind the admin's table lock for up to
				// ttl+1s, and a lease is trusted only for its TTL from when
				// the acquire was sent (with 2s it could be lost at once on
				// a loaded machine, before its command started).
				next, nextErr := startBin(t, []string{"DATABASE_URL=" + dbURL, "SECOND=" + second},
					append(append([]string{"--schema", e.schema}, k.args...), "--ttl", (3*ttl).String(), "--", "sh", "-c", secondScript)...)
				time.Sleep(500 * time.Millisecond) // let it queue up behind the first
				require.False(t, exists(second), "the second holder ran while the first held: %s", nextErr)

				// Within: how long after the trigger the grandchild must be
				// gone. A lost lease is noticed at its local deadline (at
				// most TTL minus the 10% margin after the last renewal).
				within := 500 * time.Millisecond
				var tx pgx.Tx
				start := time.Now()
				switch how {
				case "sigterm":
					require.NoError(t, first.Process.Signal(syscall.SIGTERM))
				case "sigkill":
					require.NoError(t, first.Process.Kill())
				case "lost":
					// An admin blocks every renewal (and the second holder)
					// for longer than the TTL.
					var err error
					tx, err = admin.Begin(ctxT(t))
					require.NoError(t, err)
					defer func() { _ = tx.Rollback(ctxT(t)) }()
					_, err = tx.Exec(ctxT(t), "LOCK TABLE "+pgx.Identifier{e.schema, k.table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
					require.NoError(t, err)
					start = time.Now()
					within += ttl - ttl/10
				}
				lastAlive := waitTreeGone(t, work, second, start.Add(within+5*time.Second), firstErr)
				t.Logf("grandchild last seen alive %v after the trigger", lastAlive.Sub(start).Round(time.Millisecond))
				require.LessOrEqual(t, lastAlive.Sub(start), within, "first: %s", firstErr)
				if tx != nil {
					time.Sleep(time.Until(start.Add(ttl + time.Second)))
					require.NoError(t, tx.Rollback(ctxT(t)))
				}

				waitUntil(t, 30*time.Second, "the second holder's command", func() bool { return exists(second) }, nextErr)
				b, err := os.ReadFile(second)
				require.NoError(t, err)
				secondAt := mustNanos(t, string(b))
				lines := strings.Fields(readFile(t, work))
				lastWork := mustNanos(t, lines[len(lines)-1])
				require.Less(t, lastWork, secondAt, "the first's work wrote after the second started")
				require.Less(t, lastAlive.UnixNano(), secondAt, "the grandchild was seen alive after the second holder started")
				require.False(t, treeAlive(work))

				code := exitCodeOf(t, first)
				switch how {
				case "sigterm":
					require.Equal(t, 128+int(syscall.SIGTERM), code, "stderr: %s", firstErr)
				case "sigkill":
					require.Equal(t, -1, code)
				case "lost":
					require.NotEqual(t, 0, code, "stderr: %s", firstErr)
				}
				require.Equal(t, 0, exitCodeOf(t, next), "stderr: %s", nextErr)
			})
		}
	}
}

// A command that exits leaving work behind in its group: that work is
// stopped before the lease is released.
func TestLockStopsLeftoversBeforeRelease(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	cmd, stderr := startBin(t, []string{"DATABASE_URL=" + dbURL, "WORK=" + work},
		"--schema", e.schema, "lock", "job", "--", "sh", "-c", `sleep 100 & echo started > "$WORK"`)
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	require.True(t, fileHasLine(work))
	require.False(t, treeAlive(work), "the background sleep outlived the lock")
}

// startBin starts the binary with env added to a clean environment.
func startBin(t *testing.T, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second // a tree that outlived it may hold its output open
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, out
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool, out *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		require.Truef(t, time.Now().Before(deadline), "timed out waiting for %s; output: %s", what, out)
		time.Sleep(10 * time.Millisecond)
	}
}

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

func fileHasLine(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(b), "\n")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func mustNanos(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	require.NoError(t, err, "%q", s)
	return n
}

// Interrupted while waiting, lock, elect and queue lock exit 4: the
// command never ran.
func TestInterruptedWhileWaitingExits4(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	l, err := e.client.Lease(ctxT(t), "job")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()
	_, stop := e.runElector(e.client, "group")
	defer stop()
	turn, err := e.client.Turn(ctxT(t), "printer")
	require.NoError(t, err)
	defer func() { _ = turn.Release(ctxT(t)) }()

	for _, args := range [][]string{{"lock", "job"}, {"elect", "group"}, {"queue", "lock", "printer"}} {
		dir := t.TempDir()
		ran := filepath.Join(dir, "ran")
		cmd, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "RAN=" + ran},
			append(append([]string{"--schema", e.schema}, args...), "--", "sh", "-c", `touch "$RAN"`)...)
		time.Sleep(700 * time.Millisecond) // waiting now
		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, exitRefused, exitCodeOf(t, cmd), "%v: %s", args, out)
		require.Contains(t, out.String(), "interrupted", "%v", args)
		require.False(t, exists(ran), "%v: the command ran", args)
	}
}
