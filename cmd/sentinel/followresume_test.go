package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// follow ended with "resume with --after CURSOR", a flag, not a command:
// an operator who typed `sentinel follow --after CURSOR` from it followed
// namespace "default" of schema "sentinel" instead of what they followed
// (--all-namespaces, -n, --schema, KEYs), from that cursor, and saw
// nothing. It now prints the command line that resumes, runnable as
// printed.
func TestFollowPrintsTheCommandThatResumes(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("it's ns")
	for _, k := range []string{"order 1", "order 2"} {
		_, err := sentinel.Once(ctxT(t), pay, k, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}

	r := e.run("follow", "--all-namespaces", "--after", "0", "--count", "1", "--json")
	requireCode(t, r, exitOK)
	var first eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &first), r.stdout)
	require.Contains(t, r.stderr, "resume with --after "+first.Cursor)
	line := findCommand(t, r.stderr, "sentinel follow")
	require.Equal(t, "sentinel follow --all-namespaces --count 1 --json --after "+first.Cursor+" --schema "+e.schema, line)

	p := runShell(t, line)
	requireCode(t, p, exitOK)
	var next eventJSON
	require.NoError(t, json.Unmarshal([]byte(p.stdout), &next), p.stdout)
	require.Greater(t, next.ID, first.ID)
	require.Equal(t, "it's ns", next.Namespace)

	r = e.run("follow", "-n", "it's ns", "order 2", "--after", "0", "--count", "1")
	requireCode(t, r, exitOK)
	line = findCommand(t, r.stderr, "sentinel follow")
	require.Regexp(t, `^sentinel follow 'order 2' --count 1 --namespace 'it'\\''s ns' --after \S+ --schema `+e.schema+`$`, line)
}
