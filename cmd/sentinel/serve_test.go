package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
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
	e.uncertainKey(e.newClient("payments"), "charge-job-92") // issue 25.1: another namespace

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
	// Without --namespace the start page lists every namespace, and the
	// top of the page counts each namespace's uncertain keys.
	require.Contains(t, string(body), `data-key="charge-job-92"`)
	require.Regexp(t, `data-ns="payments">payments: 1<`, string(body))
	require.Regexp(t, `data-ns="default">default: 1<`, string(body))
	http.DefaultClient.CloseIdleConnections()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)

	// With --namespace the start page lists that one; the counts still
	// name every namespace.
	cmd, _, out, stderr = e.start("serve", "--addr", "127.0.0.1:0", "--read-only", "-n", "default")
	line, err = out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	resp, err = http.Get(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")))
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NotContains(t, string(body), `data-key="charge-job-92"`)
	require.Contains(t, string(body), `data-key="charge-&lt;b&gt;42&lt;/b&gt;"`)
	require.Regexp(t, `data-ns="payments">payments: 1<`, string(body))
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}

// A weak operator token is refused at start with exit 2 and a message
// saying how to make one, wherever it comes from.
func TestServeRefusesWeakToken(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	dir := t.TempDir()
	weakFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(weakFile, []byte("hunter2\n"), 0o600))
	weakOps := filepath.Join(dir, "operators")
	require.NoError(t, os.WriteFile(weakOps, []byte("ada:"+strongToken(t)+"\ngrace:0123456789abcdef\n"), 0o600))
	for name, tc := range map[string]struct{ env, args []string }{
		"env":             {[]string{"SENTINEL_OPERATOR_TOKEN=x"}, nil},
		"env 31 hex":      {[]string{"SENTINEL_OPERATOR_TOKEN=0123456789abcdef0123456789abcde"}, nil},
		"flag":            {nil, []string{"--operator-token", "s3cret-operator-token"}},
		"token file":      {nil, []string{"--operator-token-file", weakFile}},
		"operators file":  {nil, []string{"--operators-file", weakOps}},
		"repeated letter": {[]string{"SENTINEL_OPERATOR_TOKEN=" + strings.Repeat("a", 64)}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--schema", e.schema, "serve", "--addr", "127.0.0.1:0"}, tc.args...)
			r := runBin(t, append([]string{"DATABASE_URL=" + dbURL}, tc.env...), nil, args...)
			requireCode(t, r, exitUsage)
			require.Contains(t, r.stderr, "too weak")
			require.Contains(t, r.stderr, "openssl rand -hex 32")
			require.Empty(t, r.stdout, "nothing listened")
		})
	}
}

func strongToken(t *testing.T) string {
	t.Helper()
	var b [32]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

var serveCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// serve answers only its own host (421 for a rebound name), names from
// --allowed-host, and records the operator the token belongs to, not the
// name typed in the form.
func TestServeHostCheckAndOperators(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.newClient("default"), "charge-7")
	ex, err := e.client.Inspect(ctxT(t), "charge-7")
	require.NoError(t, err)
	ada, grace := strongToken(t), strongToken(t)
	ops := filepath.Join(t.TempDir(), "operators")
	require.NoError(t, os.WriteFile(ops, []byte("# operators\nada:"+ada+"\n\ngrace: "+grace+"\n"), 0o600))

	cmd, _, out, stderr := e.start("serve", "--addr", "127.0.0.1:0", "--operators-file", ops,
		"--allowed-host", "ops.example.com", "--allowed-host", "console.internal:9443")
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")), "/")
	hostPort := strings.TrimPrefix(base, "http://")
	_, port, err := net.SplitHostPort(hostPort)
	require.NoError(t, err)
	do := func(method, path, host string, form url.Values, hdr ...string) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctxT(t), method, base+path, body)
		require.NoError(t, err)
		req.Host = host
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, host := range []string{"attacker.example:" + port, "attacker.example", "console.internal:" + port} {
		code, body := do(http.MethodGet, "/", host, nil)
		require.Equal(t, http.StatusMisdirectedRequest, code, "%s: %s", host, body)
		require.NotContains(t, body, "charge-7")
	}
	for _, host := range []string{hostPort, "localhost:" + port, "[::1]:" + port, "ops.example.com", "console.internal:9443"} {
		code, body := do(http.MethodGet, "/", host, nil)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
		require.Contains(t, body, "charge-7")
	}

	tok := strconv.FormatInt(ex.Token, 10)
	code, body := do(http.MethodGet, "/confirm?"+url.Values{"action": {"reconcile"}, "ns": {"default"}, "key": {"charge-7"}, "token": {tok}}.Encode(), hostPort, nil)
	require.Equal(t, http.StatusOK, code, body)
	m := serveCSRF.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	form := url.Values{"action": {"reconcile"}, "ns": {"default"}, "key": {"charge-7"}, "token": {tok},
		"csrf": {html.UnescapeString(m[1])}, "operator": {"ada"}, "operator_token": {grace}}
	// Through a rebound name, with the Origin its page would send: 421.
	code, _ = do(http.MethodPost, "/act", "attacker.example:"+port, form, "Origin", "http://attacker.example:"+port)
	require.Equal(t, http.StatusMisdirectedRequest, code)
	code, body = do(http.MethodPost, "/act", hostPort, form, "Origin", "http://"+hostPort)
	require.Equal(t, http.StatusOK, code, body)
	hist, err := e.client.History(ctxT(t), "charge-7")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reconciling", last.Type)
	require.Equal(t, "grace", last.Metadata["operator_name"], "the token's operator, not the typed name")
	require.Equal(t, "token", last.Metadata["operator_auth"])
	http.DefaultClient.CloseIdleConnections()

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	require.NotContains(t, stderr.String(), "warning", "a mode-600 file and no token in argv: no warning")
}

// serve --listen-any on every interface prints the URL it listens on; that
// URL opens the page (it answered 421 Misdirected Request: its Host, the
// unspecified address, was neither loopback nor the connection's address).
func TestServeListenAnyPrintsAURLThatOpens(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	cmd, _, out, stderr := e.start("serve", "--listen-any", "--addr", "0.0.0.0:0", "--read-only")
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	u := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	resp, err := http.Get(u)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", u, body)
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}
