package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// inspect of a key an operator reconciled on the console said "taken
// from: ... by reconcile at ... (root@host/sentinel-PID)": the console's
// process (sentinel serve's owner), not the operator who acted, whom the
// history names (operator_name). The console's own key page names the
// operator; inspect now does too, "(NAME through OWNER)", and --json
// gives "operator_name" in "taken_from". A key reconciled with the CLI
// (no operator_name: the owner names the operator) shows as before.
func TestInspectTakenFromNamesTheConsoleOperator(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "charge-7")
	ex, err := e.client.Inspect(ctxT(t), "charge-7")
	require.NoError(t, err)

	// Ada reconciles it on the console that sentinel serve runs.
	b := make([]byte, 32)
	_, err = rand.Read(b)
	require.NoError(t, err)
	token := hex.EncodeToString(b)
	cmd, _, out, stderr := startPiped(t, []string{"DATABASE_URL=" + dbURL, "SENTINEL_OPERATOR_TOKEN=" + token},
		"--schema", e.schema, "serve", "--addr", "127.0.0.1:0")
	line, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	base := strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(line, "listening on ")), "/")
	form := url.Values{"action": {"reconcile"}, "ns": {"default"}, "key": {"charge-7"}, "token": {strconv.FormatInt(ex.Token, 10)}}
	resp, err := http.Get(base + "/confirm?" + form.Encode())
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(string(body))
	require.NotNil(t, m, string(body))
	form.Set("csrf", html.UnescapeString(m[1]))
	form.Set("operator", "Ada")
	form.Set("operator_token", token)
	resp, err = http.PostForm(base+"/act", form)
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	http.DefaultClient.CloseIdleConnections()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
	after, err := e.client.Inspect(ctxT(t), "charge-7")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, after.State)

	r := e.run("inspect", "charge-7")
	requireCode(t, r, exitOK)
	require.Regexp(t, `taken from:\s+\S+ \(host \S+, pid \d+\), token 1, by reconcile at [0-9:. Z-]+ \(Ada through `+regexp.QuoteMeta(after.Owner)+`\)`, r.stdout)
	r = e.run("inspect", "charge-7", "--json")
	requireCode(t, r, exitOK)
	var j struct {
		TakenFrom struct {
			By           string  `json:"by"`
			OperatorName *string `json:"operator_name"`
		} `json:"taken_from"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &j), r.stdout)
	require.Equal(t, after.Owner, j.TakenFrom.By, "by stays the reconciling process's owner")
	require.NotNil(t, j.TakenFrom.OperatorName, r.stdout)
	require.Equal(t, "Ada", *j.TakenFrom.OperatorName)

	// Reconciled with the CLI: the owner names the operator; no "through".
	e.uncertainKey(e.client, "charge-8")
	requireCode(t, e.run("reconcile", "charge-8", "--operator", "alice", "--yes"), exitOK)
	r = e.run("inspect", "charge-8")
	requireCode(t, r, exitOK)
	require.Regexp(t, `by reconcile at [0-9:. Z-]+ \(alice/sentinel-\d+\)\n`, r.stdout)
	require.NotContains(t, r.stdout, "through")
	r = e.run("inspect", "charge-8", "--json")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, `"operator_name"`)
}
