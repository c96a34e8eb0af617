package main

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// Free text the commands store (--reason, a --header value of
// idempotency resolve, and the text in a force-complete or set-result
// VALUE) must be UTF-8: JSON (the history's metadata, the stored
// response's header) cannot carry other bytes, and encoding/json replaced
// each bad byte with U+FFFD on the way in, so "\xff" was recorded as "�"
// with exit 0. It is refused, exit 2, before the connection, and nothing
// is written.
func TestFreeTextNotUTF8RefusedBeforeConnecting(t *testing.T) {
	bad := "PSP says \xff"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"reconcile", "k", "--reason", bad, "--yes"}, "invalid --reason"},
		{[]string{"reset", "k", "--reason", bad, "--yes"}, "invalid --reason"},
		{[]string{"force-complete", "k", "1", "--reason", bad, "--yes"}, "invalid --reason"},
		{[]string{"set-result", "k", "1", "--reason", bad, "--yes"}, "invalid --reason"},
		{[]string{"idempotency", "resolve", "k", "--status", "200", "--body", "x", "--reason", bad, "--yes"}, "invalid --reason"},
		{[]string{"idempotency", "resolve", "k", "--status", "200", "--body", "x", "--header", "X-Note: " + bad, "--yes"}, "--header"},
		{[]string{"force-complete", "k", strconv.Quote("x") + "\xff", "--yes"}, "VALUE"},
		{[]string{"force-complete", "k", `"` + bad + `"`, "--yes"}, "VALUE must be UTF-8"},
		{[]string{"set-result", "k", `{"note":"` + bad + `"}`, "--yes"}, "VALUE must be UTF-8"},
	}
	for _, tc := range cases {
		r := runBin(t, []string{"DATABASE_URL=postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2"}, nil, tc.args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, tc.want, "%q", tc.args)
		require.NotContains(t, r.stderr, "connect", "%q", tc.args)
		require.Empty(t, r.stdout, "%q", tc.args)
	}
}

// With the database up, the refusal writes nothing: the key is not
// reconciled, and no event records the altered reason.
func TestReasonNotUTF8WritesNothing(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	e.uncertainKey(e.client, "order-1")
	before, err := e.client.History(ctxT(t), "order-1")
	require.NoError(t, err)

	r := e.run("reconcile", "order-1", "--reason", "PSP says \xff", "--yes")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "invalid --reason")
	got, err := e.client.Inspect(ctxT(t), "order-1")
	require.NoError(t, err)
	require.Equal(t, sentinel.StateExecuting, got.State)
	after, err := e.client.History(ctxT(t), "order-1")
	require.NoError(t, err)
	require.Len(t, after, len(before))

	// A valid reason is recorded as given.
	r = e.run("reconcile", "order-1", "--reason", "PSP says «no»", "--yes", "--json")
	requireCode(t, r, exitOK)
	r = e.run("history", "order-1", "--json")
	requireCode(t, r, exitOK)
	var evs []eventJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &evs))
	require.Equal(t, "PSP says «no»", evs[len(evs)-1].Metadata["reason"])
}
