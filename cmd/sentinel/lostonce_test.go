package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// The error of a lease lost while CMD ran names the lease and the loss's
// cause once: it used to wrap the library's LostError, which names the
// lease again and whose cause (a stale token "released, expired or taken
// over") repeats its reason ("taken over, released or expired").
func TestLostLeaseErrorSaysItOnce(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	started := filepath.Join(t.TempDir(), "started")
	first, out := startBin(t, []string{"DATABASE_URL=" + dbURL, "STARTED=" + started},
		"--schema", e.schema, "lock", "job", "--ttl", "3s", "--", "sh", "-c", `touch "$STARTED"; exec sleep 60`)
	waitUntil(t, 20*time.Second, "the command", func() bool { return exists(started) }, out)
	// An operator expires the lease and another holder takes it.
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "leases"}.Sanitize()+
		" SET expires_at = pg_catalog.now() WHERE key = 'job'")
	require.NoError(t, err)
	l, err := e.client.Lease(ctxT(t), "job")
	require.NoError(t, err)
	defer func() { _ = l.Release(ctxT(t)) }()

	code := exitCodeOf(t, first)
	require.Equal(t, 128+int(syscall.SIGKILL), code, "output: %s", out)
	text := out.String()
	t.Logf("output:\n%s", text)
	var last string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if strings.Contains(line, "was lost while sh ran") {
			last = line
		}
	}
	require.NotEmpty(t, last, "output: %s", text)
	require.Equal(t, 1, strings.Count(last, "taken over"), "the cause said more than once: %s", last)
	require.Equal(t, 1, strings.Count(last, "job"), "the lease named more than once: %s", last)
}
