package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A step refused because --token no longer matches ended with the
// library's "it moved on; Inspect it again": a Go method's name, no
// command. The refusal now ends with the inspect command line for the
// key, runnable as printed; nothing is written.
func TestStaleTokenRefusalGivesTheInspectLine(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay := e.newClient("it's ns")
	e.uncertainKey(pay, "order 42")
	_, err := sentinel.Once(ctxT(t), pay, "lost-1", func(context.Context) (func(), error) { return func() {}, nil })
	require.ErrorIs(t, err, sentinel.ErrResult)

	for _, c := range []struct {
		args   []string
		quoted string
	}{
		{[]string{"reconcile", "order 42", "-n", "it's ns", "--token", "999", "--yes"}, "'order 42'"},
		{[]string{"set-result", "lost-1", "7", "-n", "it's ns", "--token", "999", "--yes"}, "lost-1"},
	} {
		args := c.args
		r := e.run(args...)
		requireCode(t, r, exitRefused)
		require.Contains(t, r.stderr, "expected token 999", "%v", args)
		line := findCommand(t, r.stderr, "sentinel inspect")
		require.Equal(t, "sentinel inspect "+c.quoted+" -n 'it'\\''s ns' --schema "+e.schema, line)
		p := runShell(t, line)
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, "token:")
	}
	ex, err := pay.Inspect(ctxT(t), "order 42")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, ex.State)
}
