package console_test

import (
	"context"
	"errors"
	"html"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// nextCommands returns the commands a key page prints (next-command),
// as a shell reads them: each run through sh -c with a sentinel on PATH
// that prints the words it got, one a line.
func nextCommands(t *testing.T, body string) [][]string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentinel"), []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\036' \"$a\"; done\n"), 0o755))
	var out [][]string
	for _, m := range regexp.MustCompile(`<code class="next-command">([^<]*)</code>`).FindAllStringSubmatch(body, -1) {
		cmd := exec.Command("sh", "-c", html.UnescapeString(m[1]))
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		b, err := cmd.Output()
		require.NoError(t, err, m[1])
		out = append(out, strings.Split(strings.TrimSuffix(string(b), "\x1e"), "\x1e"))
	}
	return out
}

// A read-only console told the operator to reconcile an uncertain key
// ("find out whether the work happened, then reconcile") and printed no
// command on the key page: only an action tried and refused named
// sentinel inspect. The key page of a read-only console now prints the
// commands, as sentinel inspect does, each runnable as printed from a
// shell with a key and a namespace a shell treats specially: reconcile
// for an uncertain key, force-complete and reset for a reconciling one,
// sentinel idempotency inspect for an HTTP key.
func TestReadOnlyKeyPagePrintsTheCommands(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	const ns = `pay ments $x*`
	keys := []string{`-k 'x' $HOME *`, `k "y" $(echo z) ;`}
	for _, k := range keys {
		_, err := sentinel.Once(ctx, c, k, func(context.Context) (int, error) { return 0, errors.New("boom") }, sentinel.WithNamespace(ns))
		require.ErrorIs(t, err, sentinel.ErrUncertain)
	}
	const scope, hkey = `it's $HOME`, `-h "z"`
	_, err := sentinel.Once(ctx, c, idempotency.ExecutionKey(scope, hkey), func(context.Context) (int, error) { return 0, errors.New("boom") }, sentinel.WithNamespace(ns))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	rec, err := c.Reconcile(ctx, keys[1], sentinel.WithNamespace(ns))
	require.NoError(t, err)
	schema := c.Config().Schema
	ro := server(t, c, console.Options{ReadOnly: true})
	page := func(key string) string {
		code, body := get(t, ro.URL+"/ops/key?"+url.Values{"ns": {ns}, "key": {key}}.Encode())
		require.Equal(t, http.StatusOK, code, body)
		return body
	}

	body := page(keys[0])
	require.Contains(t, body, "then reconcile")
	require.Equal(t, [][]string{{"reconcile", "-n", ns, "--token", "1", "--schema", schema, "--", keys[0]}}, nextCommands(t, body))

	body = page(keys[1])
	tok := strconv.FormatInt(rec.Token, 10)
	require.Equal(t, [][]string{
		{"force-complete", keys[1], "-n", ns, "--token", tok, "--schema", schema},
		{"reset", keys[1], "-n", ns, "--token", tok, "--schema", schema},
	}, nextCommands(t, body))

	body = page(idempotency.ExecutionKey(scope, hkey))
	require.Equal(t, [][]string{{"idempotency", "inspect", "--scope", scope, "-n", ns, "--schema", schema, "--", hkey}}, nextCommands(t, body))

	// A console that acts offers the actions instead.
	rw := server(t, c, console.Options{OperatorToken: opToken})
	code, body := get(t, rw.URL+"/ops/key?"+url.Values{"ns": {ns}, "key": {keys[0]}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "next-command")
}
