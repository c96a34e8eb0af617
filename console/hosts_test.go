package console_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// getHost sends a GET to u with the Host header set to host, as a browser
// whose DNS points host at this machine would.
func getHost(t *testing.T, u, host string, hdr ...string) (int, string) {
	t.Helper()
	return doHost(t, http.MethodGet, u, host, nil, hdr...)
}

func doHost(t *testing.T, method, u, host string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(context.Background(), method, u, body)
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
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// DNS rebinding: a page at attacker.example whose name now points at
// 127.0.0.1 sends Host: attacker.example. The console refuses it (421) on
// every route, the action included, and answers loopback names, the
// address it listens on and the names configured.
func TestHostCheckRefusesForeignHost(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "charge-1")
	ex, err := c.Inspect(ctx, "charge-1")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken, AllowedHosts: []string{"ops.example.com", "Console.Internal:9443"}})
	port := s.Listener.Addr().(*net.TCPAddr).Port
	p := ":" + itoa(port)

	for _, host := range []string{"attacker.example" + p, "attacker.example", "127.0.0.1.nip.io" + p, "localhost.attacker.example" + p,
		"ops.example.com.attacker.example", "console.internal" + p, "console.internal:443", "10.1.2.3" + p} {
		for _, path := range []string{"/ops/", "/ops/key?key=charge-1", "/ops/events", "/ops/static/live.js", "/ops/elections"} {
			code, body := getHost(t, s.URL+path, host)
			require.Equal(t, http.StatusMisdirectedRequest, code, "%s %s: %s", host, path, body)
			require.NotContains(t, body, "charge-1")
		}
	}
	for _, host := range []string{"127.0.0.1" + p, "localhost" + p, "LOCALHOST" + p, "localhost", "[::1]" + p, "127.0.0.1",
		"ops.example.com", "ops.example.com:8443", "OPS.example.com" + p, "ops.example.com.", "localhost.:" + itoa(port), "console.internal:9443"} {
		code, body := getHost(t, s.URL+"/ops/", host)
		require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
		require.Contains(t, body, "charge-1")
	}

	// The action through a rebound name: Origin equals Host, as the
	// attacker's page makes it; refused before the form is read.
	form := confirmForm(t, s.URL, "reconcile", "default", "charge-1", ex.Token)
	code, body := doHost(t, http.MethodPost, s.URL+"/ops/act", "attacker.example"+p, form,
		"Origin", "http://attacker.example"+p, "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusMisdirectedRequest, code, body)
	now, err := c.Inspect(ctx, "charge-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, now.State)
	require.Equal(t, ex.Token, now.Token)
	// An allowed Host with an Origin of another name is still cross-site.
	code, _ = doHost(t, http.MethodPost, s.URL+"/ops/act", "localhost"+p, form, "Origin", "http://attacker.example"+p)
	require.Equal(t, http.StatusForbidden, code)
	// The same form from the console's own page goes through.
	code, body = doHost(t, http.MethodPost, s.URL+"/ops/act", "localhost"+p, form, "Origin", "http://localhost"+p)
	require.Equal(t, http.StatusOK, code, body)

	// AnyHost turns the check off; a malformed entry is refused.
	any := server(t, c, console.Options{ReadOnly: true, AllowedHosts: []string{console.AnyHost}})
	code, _ = getHost(t, any.URL+"/ops/", "attacker.example")
	require.Equal(t, http.StatusOK, code)
	_, err = console.New(c, console.Options{ReadOnly: true, AllowedHosts: []string{"http://ops.example.com/"}})
	require.Error(t, err)
}

// The address the server listens on is its own name: a console bound to
// a non-loopback address answers requests addressed to that address.
func TestHostCheckListenAddress(t *testing.T) {
	ip := nonLoopbackIP(t)
	c, _ := newClient(t)
	h, err := console.New(c, console.Options{ReadOnly: true})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	code, body := getHost(t, "http://"+addr+"/", addr)
	require.Equal(t, http.StatusOK, code, body)
	code, _ = getHost(t, "http://"+addr+"/", "attacker.example:"+itoa(ln.Addr().(*net.TCPAddr).Port))
	require.Equal(t, http.StatusMisdirectedRequest, code)
	// Another address of the machine is not this listener's.
	code, _ = getHost(t, "http://"+addr+"/", "192.0.2.1:"+itoa(ln.Addr().(*net.TCPAddr).Port))
	require.Equal(t, http.StatusMisdirectedRequest, code)
}

func nonLoopbackIP(t *testing.T) net.IP {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return nil
}

func itoa(i int) string { return strconv.Itoa(i) }

// Weak operator tokens are refused: at least 128 bits.
func TestWeakTokensRefused(t *testing.T) {
	c, _ := newClient(t)
	for _, tok := range []string{
		"x",
		"s3cret-operator-token",
		"0123456789abcdef0123456789abcde", // 31 hex characters: 124 bits
		strings.Repeat("a", 64),
		strings.Repeat("ab", 32),
		strings.Repeat("9f86d081", 8),            // a repeated 32-bit token
		"12345678901234567890123456789012345678", // 38 digits: 126 bits
	} {
		_, err := console.New(c, console.Options{OperatorToken: tok})
		require.True(t, errors.Is(err, console.ErrWeakToken), "%q: %v", tok, err)
		require.Contains(t, err.Error(), "openssl rand -hex 32")
		_, err = console.New(c, console.Options{Operators: map[string]string{"ada": tok}})
		require.True(t, errors.Is(err, console.ErrWeakToken), "operator %q: %v", tok, err)
	}
	for _, tok := range []string{
		opToken,
		"5d41402abc4b2a76b9719d911017c592", // 32 hex characters: 128 bits
		"q2Xv8Jm0Zr4LwT6yNc1Hs9",           // 22 base64 characters: 132 bits
	} {
		_, err := console.New(c, console.Options{OperatorToken: tok})
		require.NoError(t, err, tok)
	}
	// Two operators with one token cannot be told apart.
	_, err := console.New(c, console.Options{Operators: map[string]string{"ada": opToken, "grace": opToken}})
	require.Error(t, err)
	_, err = console.New(c, console.Options{OperatorToken: opToken, Operators: map[string]string{"grace": opToken}})
	require.Error(t, err)
}

// With a token per operator the history names the token's operator,
// whatever the form says.
func TestOperatorNamedByToken(t *testing.T) {
	const adaTok, graceTok = "0b1e6f3c9d2a4857e6f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7", "4c71bc29961cf9248478736688d4d72d60c7b16259fe720bf02f347f9e36d2dc"
	c, _ := newClient(t)
	ctx := ctxT(t)
	uncertain(t, c, "k")
	ex, err := c.Inspect(ctx, "k")
	require.NoError(t, err)
	s := server(t, c, console.Options{Operators: map[string]string{"ada": adaTok, "grace": graceTok}})
	code, body := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"reconcile"}, "ns": {"default"}, "key": {"k"}, "token": {itoa(int(ex.Token))}}.Encode())
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, `name="operator"`, "no name to type: the token names the operator")

	form := confirmForm(t, s.URL, "reconcile", "default", "k", ex.Token)
	form.Set("operator", "ada") // a claimed name does not count
	form.Set("operator_token", graceTok)
	code, body = post(t, s.URL, form)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "grace")
	hist, err := c.History(ctx, "k")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	require.Equal(t, "reconciling", last.Type)
	require.Equal(t, "grace", last.Metadata["operator_name"])
	require.Equal(t, "token", last.Metadata["operator_auth"])

	// The shared token's name is recorded as self-declared.
	uncertain(t, c, "k2")
	ex2, err := c.Inspect(ctx, "k2")
	require.NoError(t, err)
	s2 := server(t, c, console.Options{OperatorToken: opToken})
	code, body = post(t, s2.URL, confirmForm(t, s2.URL, "reconcile", "default", "k2", ex2.Token))
	require.Equal(t, http.StatusOK, code, body)
	hist, err = c.History(ctx, "k2")
	require.NoError(t, err)
	last = hist[len(hist)-1]
	require.Equal(t, "Ada", last.Metadata["operator_name"])
	require.Equal(t, "self-declared", last.Metadata["operator_auth"])
}

// Behind a reverse proxy that forwards Host as the console's loopback
// address (documented to need nothing), the browser's Origin is the
// proxy's public name: an action from the console's own page, which the
// browser marks same-origin, goes through.
func TestActionBehindAProxyThatRewritesHost(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "charge-proxy")
	ex, err := c.Inspect(ctxT(t), "charge-proxy")
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	form := confirmForm(t, s.URL, "reconcile", "default", "charge-proxy", ex.Token)
	code, body := doHost(t, http.MethodPost, s.URL+"/ops/act", u.Host, form,
		"Origin", "https://ops.example.com", "Sec-Fetch-Site", "same-origin")
	require.Equal(t, http.StatusOK, code, "an operator's own action refused as from another site: %s", body)
	now, err := c.Inspect(ctxT(t), "charge-proxy")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, now.State)
	// A browser's cross-site request through the same proxy is refused.
	form = confirmForm(t, s.URL, "reset", "default", "charge-proxy", now.Token)
	code, _ = doHost(t, http.MethodPost, s.URL+"/ops/act", u.Host, form,
		"Origin", "https://attacker.example", "Sec-Fetch-Site", "cross-site")
	require.Equal(t, http.StatusForbidden, code)
}
