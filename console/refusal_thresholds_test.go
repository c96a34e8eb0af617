package console_test

import (
	"html"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// refusalCommand returns the command a read-only console's refusal
// prints ("the command line: COMMAND prints the commands"), as a shell
// reads it: run through sh -c with a sentinel on PATH that prints the
// words it got.
func refusalCommand(t *testing.T, body string) []string {
	t.Helper()
	m := regexp.MustCompile(`the command line: (.*) prints the commands for the key`).FindStringSubmatch(body)
	require.NotNil(t, m, body)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sentinel"), []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\036' \"$a\"; done\n"), 0o755))
	cmd := exec.Command("sh", "-c", html.UnescapeString(m[1]))
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
	b, err := cmd.Output()
	require.NoError(t, err, m[1])
	return strings.Split(strings.TrimSuffix(string(b), "\x1e"), "\x1e")
}

// A read-only console refused an action with "sentinel inspect KEY -n NS
// prints the commands for the key's state", without the console's
// thresholds: started with --rerun-pending-after 10m (or
// --reconciling-after), the console said a key needed an operator and the
// command it printed said it did not (it judged the key by 15m and 1h).
// The command now carries the thresholds that are not the defaults, as
// typed, and runs as printed from a shell with a key and a namespace a
// shell treats specially.
func TestReadOnlyRefusalCarriesThresholds(t *testing.T) {
	c, _ := newClient(t)
	const ns, key = `pay ments $x`, `-k 'x' $HOME`
	rerunPending(t, c, ns, key)
	schema := c.Config().Schema
	refusal := func(opts console.Options) []string {
		t.Helper()
		opts.ReadOnly = true
		s := server(t, c, opts)
		code, body := get(t, s.URL+"/ops/confirm?"+url.Values{"action": {"reconcile"}, "ns": {ns}, "key": {key}, "token": {"1"}}.Encode())
		require.Equal(t, http.StatusForbidden, code, body)
		return refusalCommand(t, body)
	}
	require.Equal(t, []string{"inspect", "-n", ns, "--schema", schema, "--", key}, refusal(console.Options{}))
	require.Equal(t, []string{"inspect", "-n", ns, "--rerun-pending-after", "10m", "--schema", schema, "--", key},
		refusal(console.Options{RerunPendingAfter: 10 * time.Minute}))
	require.Equal(t, []string{"inspect", "-n", ns, "--reconciling-after", "1h30m", "--schema", schema, "--", key},
		refusal(console.Options{ReconcilingAfter: 90 * time.Minute}))
	require.Equal(t, []string{"inspect", "-n", ns, "--rerun-pending-after", "10m", "--reconciling-after", "4h", "--schema", schema, "--", key},
		refusal(console.Options{RerunPendingAfter: 10 * time.Minute, ReconcilingAfter: 4 * time.Hour}))
	require.Equal(t, []string{"inspect", "-n", ns, "--schema", schema, "--", key},
		refusal(console.Options{RerunPendingAfter: console.DefaultRerunPendingAfter, ReconcilingAfter: console.DefaultReconcilingAfter}), "the defaults are not printed")
}

// The page of an HTTP request's key reconciling for longer than
// Options.ReconcilingAfter, on a read-only console, prints sentinel
// idempotency inspect with --reconciling-after when it is not the
// default, so that the command marks the key as the page does.
func TestHTTPKeyPageCarriesReconcilingAfter(t *testing.T) {
	c, schema := newClient(t)
	const ns, scope, hkey = `pay ments`, `it's $HOME`, `-h "z"`
	key := idempotency.ExecutionKey(scope, hkey)
	reconcilingKey(t, c, ns, key)
	ageReconciling(t, schema, key, 45*time.Minute)
	s := server(t, c, console.Options{ReadOnly: true, ReconcilingAfter: 30 * time.Minute})
	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {ns}, "key": {key}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, ">reconciling (needs an operator: for more than 30m)</span>")
	require.Equal(t, [][]string{{"idempotency", "inspect", "--reconciling-after", "30m", "--scope", scope, "-n", ns, "--schema", schema, "--", hkey}}, nextCommands(t, body))
}
