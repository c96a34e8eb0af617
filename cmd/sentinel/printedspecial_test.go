package main

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/idempotency"
)

// Every command status and inspect print for an operator runs as printed
// from a shell when keys, scopes and the namespace hold what a shell
// treats specially (spaces, quotes, $, *, a leading -), and the operator
// named no namespace (the keys are in another): each line carries -n and
// its quoting.
func TestPrintedCommandsRunWithSpecialWords(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	const ns = `pay ments $x*`
	const scope = `it's "a" $HOME *`
	keys := []string{`-k 'x' $HOME *`, `k "y" $(echo z) ;`}
	fail := func(context.Context) (int, error) { return 0, errors.New("provider timed out") }
	c := e.newClient(ns)
	e.uncertainKey(c, idempotency.ExecutionKey(scope, keys[0])) // uncertain HTTP
	e.uncertainKey(c, `-o $x 'y' *`)                            // uncertain Once
	_, err := sentinel.Once(ctxT(t), c, idempotency.ExecutionKey(scope, keys[1]), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), c, `-r "q" $y`, fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), c, idempotency.ExecutionKey(scope, `-s $Z`), fail, sentinel.WithRerun(3))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	_, err = sentinel.Once(ctxT(t), c, `-nan "v" *`, func(context.Context) (float64, error) { return math.NaN(), nil })
	require.ErrorIs(t, err, sentinel.ErrResult)
	// A namespace and a scope that read as flags, a key that is "--".
	d := e.newClient(`-ns "q"`)
	e.uncertainKey(d, idempotency.ExecutionKey("-sc", "--"))
	e.uncertainKey(d, "--")
	_, err = admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET lease_expires_at = lease_expires_at - interval '20 minutes', updated_at = updated_at - interval '20 minutes'")
	require.NoError(t, err)

	seen := map[string]bool{}
	var check func(depth int, from string, text string)
	check = func(depth int, from, text string) {
		for _, line := range printedCommands(text) {
			if seen[line] || !strings.Contains(line, "--schema "+e.schema) {
				continue // other people's schemas come and go
			}
			seen[line] = true
			words := strings.Fields(line)
			sub := words[1]
			if sub == "idempotency" {
				sub += " " + words[2]
			}
			switch sub {
			case "reconcile", "reset", "force-complete", "set-result", "idempotency resolve":
				// Acting: run with the confirmation refused on the
				// terminal; it must get as far as asking (the words read,
				// the key found).
				answers := "n\n"
				switch sub {
				case "idempotency resolve":
					answers = "201\n\n{}\n\nn\n" // status, no header, body, then no
				case "set-result", "force-complete":
					answers = "1\nn\n" // the value, then no
				}
				p := runPrinted(t, line, answers)
				require.NotEqual(t, exitUsage, p.code, "%s (from %s):\n%s%s", line, from, p.stdout, p.stderr)
				require.NotEqual(t, exitNotFound, p.code, "%s (from %s):\n%s%s", line, from, p.stdout, p.stderr)
				continue
			}
			p := runPrinted(t, line, "")
			require.Contains(t, []int{exitOK, exitAttention}, p.code, "%s (from %s):\n%s%s", line, from, p.stdout, p.stderr)
			if depth < 3 {
				check(depth+1, line, p.stdout+"\n"+p.stderr)
			}
		}
	}
	for _, args := range [][]string{{"status"}, {"status", "--exit-code"}, {"status", "--exit-code", "--rerun-pending-after", "10m"},
		{"list", "--uncertain"}, {"list", "--rerun-pending"}, {"idempotency", "list"}} {
		r := e.run(args...)
		check(0, strings.Join(args, " "), r.stdout+"\n"+r.stderr)
	}
	// Inspect without -n: the key is elsewhere, the error names it there.
	for _, k := range []string{`-o $x 'y' *`, `-r "q" $y`} {
		r := e.run("inspect", "--", k)
		requireCode(t, r, exitNotFound)
		check(0, "inspect "+k, r.stderr)
	}
	r := e.run("inspect", "--", "--")
	requireCode(t, r, exitNotFound)
	check(0, "inspect --", r.stderr)
	r = e.run("idempotency", "inspect", "--scope", "-sc", "--", "--")
	requireCode(t, r, exitNotFound)
	check(0, "idempotency inspect --", r.stderr)
	for _, k := range append(keys, `-s $Z`) {
		r := e.run("idempotency", "inspect", "--scope", scope, "--", k)
		requireCode(t, r, exitNotFound)
		check(0, "idempotency inspect "+k, r.stderr)
	}
	for l := range seen {
		t.Log(l)
	}
	require.Greater(t, len(seen), 15)
}
