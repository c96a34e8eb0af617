package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// runShellAt runs a printed line with sh -c, the binary on PATH as
// sentinel and DATABASE_URL set to dbu (a database of the test's own).
func runShellAt(t *testing.T, dbu, line string) result {
	t.Helper()
	cmd := exec.CommandContext(ctxT(t), "sh", "-c", line)
	cmd.Env = append(cleanEnv(), "DATABASE_URL="+dbu, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err, line)
	}
	return r
}

// agedIn moves back by d the lease's end and the last change of key in
// schema s: a key rerun pending, or reconciling, that long.
func agedIn(t *testing.T, pool *pgxpool.Pool, s, key, d string) {
	t.Helper()
	_, err := pool.Exec(ctxT(t), "UPDATE "+pgx.Identifier{s, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - $2::interval, updated_at = updated_at - $2::interval WHERE key = $1", key, d)
	require.NoError(t, err)
}

// Plain status named the other schemas of the database only when they
// held uncertain executions, while status --exit-code pages on a result
// not stored, a key rerun pending past --rerun-pending-after and one
// reconciling past --reconciling-after in them too: the operator paged
// for one of those ran status and was told nothing of that schema. status
// now names every other schema holding what --exit-code pages on, by the
// same thresholds, each with the command that shows it (it runs as
// printed), and --json says what it found there
// ("needs_operator_in_other_schemas") beside "uncertain_in_other_schemas".
func TestStatusNamesEveryOtherSchemaNeedingAnOperator(t *testing.T) {
	ctx := ctxT(t)
	dbu, pool := ownDatabase(t, ctx)
	client := func(schema, ns string) *sentinel.Client {
		c, err := sentinel.New(pool, &sentinel.Config{Schema: schema, Namespace: ns})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		require.NoError(t, c.Migrate(ctx))
		return c
	}
	client("sentinel", "default")
	_, err := sentinel.Once(ctx, client("app_lost", "billing"), "refund-nan", func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	_, err = sentinel.Once(ctx, client("app_rerun", "mail"), "mail-1", func(context.Context) (int, error) {
		return 0, errors.New("smtp timed out")
	}, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	agedIn(t, pool, "app_rerun", "mail-1", "20 minutes")
	recon := client("app_recon", "ship")
	_, err = sentinel.Once(ctx, recon, "ship-1", func(context.Context) (int, error) { return 0, errors.New("carrier timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = recon.Reconcile(ctx, "ship-1")
	require.NoError(t, err)
	agedIn(t, pool, "app_recon", "ship-1", "90 minutes")
	_, err = sentinel.Once(ctx, client("app_unc", "pay"), "pay-1", func(context.Context) (int, error) { return 0, errors.New("card network timed out") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	run := func(args ...string) result {
		return runBin(t, []string{"DATABASE_URL=" + dbu}, nil, args...)
	}

	// --exit-code pages on each.
	x := run("status", "--exit-code")
	requireCode(t, x, exitAttention)
	for _, s := range []string{"app_lost", "app_rerun", "app_recon", "app_unc"} {
		require.Contains(t, x.stderr, `of schema "`+s+`"`)
	}

	// Plain status names each, with a command that shows its key.
	r := run("status")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `uncertain executions in other schemas of this database too: "app_unc"; every namespace there:`)
	require.Contains(t, r.stdout, `other schemas of this database hold keys that need an operator too (what status --exit-code pages on): `+
		`"app_lost" (1 completed with the result not stored), "app_recon" (1 reconciling for more than 1h), `+
		`"app_rerun" (1 rerun pending, needs an operator, for more than 15m); every namespace there:`, r.stdout)
	// Run as printed, each status shows what was paged on, with the
	// command that leads to the key.
	for _, c := range []struct{ schema, next, key string }{
		{"app_lost", "sentinel list --result-lost", "refund-nan"},
		{"app_rerun", "sentinel inspect mail-1", "mail-1"},
		{"app_recon", "sentinel list --state reconciling", "ship-1"},
		{"app_unc", "sentinel inspect pay-1", "pay-1"},
	} {
		line := findCommand(t, r.stdout, "sentinel status --schema "+c.schema)
		require.Equal(t, "sentinel status --schema "+c.schema, line)
		p := runShellAt(t, dbu, line)
		requireCode(t, p, exitOK)
		p = runShellAt(t, dbu, findCommand(t, p.stdout, c.next))
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, c.key, line)
	}

	// --json: beside uncertain_in_other_schemas, what was found, a line
	// per schema, namespace and kind, as --exit-code's "found".
	r = run("status", "--json")
	requireCode(t, r, exitOK)
	var st struct {
		UncertainElsewhere     []string        `json:"uncertain_in_other_schemas"`
		NeedsOperatorElsewhere []attentionJSON `json:"needs_operator_in_other_schemas"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	require.Equal(t, []string{"app_unc"}, st.UncertainElsewhere)
	kinds := map[string]string{}
	for _, f := range st.NeedsOperatorElsewhere {
		kinds[f.Schema] = f.Namespace + " " + f.Kind
		require.Equal(t, int64(1), f.Count)
		require.NotNil(t, f.Since)
	}
	require.Equal(t, map[string]string{"app_lost": "billing result_lost", "app_rerun": "mail rerun_pending",
		"app_recon": "ship reconciling", "app_unc": "pay uncertain"}, kinds, r.stdout)

	// The same thresholds as --exit-code, given without it; the command
	// printed carries them, and runs as printed.
	r = run("status", "--rerun-pending-after", "30m", "--reconciling-after", "2h")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `need an operator too (what status --exit-code pages on): "app_lost" (1 completed with the result not stored); every namespace there:`, r.stdout)
	line := findCommand(t, r.stdout, "sentinel status --reconciling-after 2h --rerun-pending-after 30m --schema app_lost")
	p := runShellAt(t, dbu, line)
	requireCode(t, p, exitOK)
	require.Contains(t, p.stdout, "RESULT NOT STORED")
	r = run("status", "--rerun-pending-after", "10m", "--reconciling-after", "30m")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, `"app_recon" (1 reconciling for more than 30m)`, r.stdout)
	require.Contains(t, r.stdout, `"app_rerun" (1 rerun pending, needs an operator, for more than 10m)`, r.stdout)

	// A schema named with --schema is not among the others; the one
	// status would have shown is.
	r = run("status", "--schema", "app_lost")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, `"app_lost" (`)
	require.Contains(t, r.stdout, `"app_recon" (1 reconciling for more than 1h)`)

	// The console (serve) names them too, at start and on every page, by
	// its thresholds, with the status line that shows each (it named
	// only schemas with uncertain executions, and a list --uncertain
	// line): with --reconciling-after 2h, app_recon's 90 minutes do not
	// count.
	cmd, _, out, stderr := startPiped(t, []string{"DATABASE_URL=" + dbu}, "serve", "--addr", "127.0.0.1:0", "--read-only", "--reconciling-after", "2h")
	first, err := out.ReadString('\n')
	require.NoError(t, err, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(first, "listening on http://127.0.0.1:"), first)
	require.Eventually(t, func() bool {
		return strings.Contains(stderr.String(), `in other schemas of this database too: "app_lost", "app_rerun", "app_unc"; this page shows only schema "sentinel"`)
	}, 10*time.Second, 10*time.Millisecond, "stderr: %s", stderr)
	resp, err := http.Get(strings.TrimSpace(strings.TrimPrefix(first, "listening on ")))
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	for _, s := range []string{"app_lost", "app_rerun", "app_unc"} {
		line := "sentinel status --reconciling-after 2h --schema " + s
		require.Contains(t, string(page), "<code>"+line+"</code>", s)
		p := runShellAt(t, dbu, line)
		requireCode(t, p, exitOK)
	}
	require.NotContains(t, string(page), "app_recon", "reconciling for less than the console's threshold")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, exitCodeOf(t, cmd), "stderr: %s", stderr)
}
