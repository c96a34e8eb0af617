package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A key that starts with "-" (list shows it as is: "-dash-key"), typed by
// an operator as list printed it, was refused with cobra's "unknown
// shorthand flag: 'd' in -dash-key" and "Run 'sentinel --help'", which
// says nothing of "--". The refusal now gives the command line with the
// word after "--", runnable as printed; nothing is written.
func TestTypedKeyThatReadsAsAFlagGetsTheLineToRun(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("payments")
	e.uncertainKey(pay, "-dash-key")
	e.uncertainKey(pay, "-yes it's")

	for _, c := range []struct {
		args []string
		line string
		code int
		out  string
	}{
		{[]string{"inspect", "-dash-key", "-n", "payments"},
			"sentinel --schema " + e.schema + " inspect -n payments -- -dash-key", exitOK, "UNCERTAIN"},
		{[]string{"history", "-n", "payments", "-yes it's"},
			"sentinel --schema " + e.schema + " history -n payments -- '-yes it'\\''s'", exitOK, "started"},
		{[]string{"reconcile", "-dash-key", "-n", "payments"},
			"sentinel --schema " + e.schema + " reconcile -n payments -- -dash-key", exitRefused, ""},
		{[]string{"reconcile", "-yes it's", "-n", "payments"},
			"sentinel --schema " + e.schema + " reconcile -n payments -- '-yes it'\\''s'", exitRefused, ""},
		{[]string{"leader", "-g1"},
			"sentinel --schema " + e.schema + " leader -- -g1", exitNotFound, ""},
	} {
		r := e.run(c.args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "unknown shorthand flag", "%v", c.args)
		line := findCommand(t, r.stderr, "sentinel ")
		require.Equal(t, c.line, line, "%v:\n%s", c.args, r.stderr)
		p := runShell(t, line)
		requireCode(t, p, c.code)
		require.Contains(t, p.stdout, c.out)
	}

	// A flag typed wrong (two dashes) gets no such line.
	r := e.run("inspect", "k", "--tokn", "5")
	requireCode(t, r, exitUsage)
	require.NotContains(t, r.stderr, "goes after --")

	// Nothing was reconciled by the refused line.
	for _, k := range []string{"-dash-key", "-yes it's"} {
		ex, err := pay.Inspect(ctxT(t), k)
		require.NoError(t, err)
		require.Equal(t, "executing", string(ex.State), k)
	}
}

// runShell runs a printed line with sh -c, stdin not a terminal, the
// binary on PATH as sentinel and the connection in the environment.
func runShell(t *testing.T, line string) result {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), "sh", "-c", line)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbURL, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return r
}
