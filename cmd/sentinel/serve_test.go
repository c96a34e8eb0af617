package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// serve runs the page from the real binary: it lists an uncertain key,
// refuses a non-loopback address and a missing operator token, and stops
// on SIGTERM with exit 0.
func TestServe(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("default"), "charge-<b>42</b>")

	requireCode(t, e.run("serve", "--addr", "0.0.0.0:0", "--read-only"), exitUsage)
	requireCode(t, e.run("serve", "--addr", "127.0.0.1:0"), exitUsage)

	cmd, _, out, stderr := e.start("serve", "--addr", "127.0.0.1:0", "--read-only")
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(line, "listening on http://127.0.0.1:"), line)
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "charge-&lt;b&gt;42&lt;/b&gt;")
	http.DefaultClient.CloseIdleConnections()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}
