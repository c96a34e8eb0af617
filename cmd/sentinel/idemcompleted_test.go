package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// A completed Idempotency-Key (a client says its retry got an odd
// response) could not be found with its scope: idempotency list showed
// only the keys not completed, and inspect without --scope sent the
// operator to that very listing. idempotency list --state completed now
// lists completed keys, each with its scope, in the table and --json, and
// inspect's not-found names that listing too.
func TestIdempotencyListShowsCompletedKeysWithTheirScope(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	const crashed = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	const done = "f00dfeed-0000-4000-8000-000000000042"
	srv.post(t, crashed, `{"amount":4200}`) // the handler panics: uncertain
	require.Equal(t, 201, srv.post(t, done, `{"amount":100}`).status)

	r := e.run("idempotency", "list", "--state", "completed")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, done)
	require.NotContains(t, r.stdout, crashed)
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.Contains(l, done) {
			line = l
		}
	}
	require.Contains(t, line, "acct_42", r.stdout)
	require.Contains(t, line, "completed", r.stdout)
	require.Contains(t, line, "POST", r.stdout)

	r = e.run("idempotency", "list", "--state", "completed", "--json")
	requireCode(t, r, exitOK)
	var out struct{ Keys []idemKeyJSON }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 1)
	require.Equal(t, "acct_42", out.Keys[0].Scope)
	require.Equal(t, done, out.Keys[0].Key)
	require.Equal(t, sentinel.StateCompleted, out.Keys[0].State)

	// Without --state: the keys not completed, as before.
	r = e.run("idempotency", "list")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, crashed)
	require.NotContains(t, r.stdout, done)
	r = e.run("idempotency", "list", "--state", "executing")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, crashed)

	// inspect without --scope names the listing that shows it.
	r = e.run("idempotency", "inspect", done, "-n", "payments")
	requireCode(t, r, exitNotFound)
	want := "sentinel idempotency list --state completed --schema " + e.schema
	require.Contains(t, r.stderr, "\n  "+want+"\n", r.stderr)

	requireCode(t, e.run("idempotency", "list", "--state", "bogus"), exitUsage)
	requireCode(t, e.run("idempotency", "list", "--state", "completed", "--uncertain"), exitUsage)
}

// --state completed read every completed execution of the namespaces
// listed (millions on a busy table), and one history read for each,
// before printing anything. With --state the listing is a page of
// --limit keys, with the command for the next page, as list's is.
func TestIdempotencyListCompletedIsPaged(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	keys := []string{
		"f00dfeed-0000-4000-8000-000000000001",
		"f00dfeed-0000-4000-8000-000000000002",
		"f00dfeed-0000-4000-8000-000000000003",
	}
	srv.post(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":1}`) // the server's first charge panics
	for _, k := range keys {
		require.Equal(t, 201, srv.post(t, k, `{"amount":100}`).status)
	}
	seen := map[string]int{}
	args := []string{"idempotency", "list", "--state", "completed", "--limit", "2"}
	for page := 1; ; page++ {
		require.LessOrEqual(t, page, 3, "pages")
		r := e.run(args...)
		requireCode(t, r, exitOK)
		n := 0
		for _, k := range keys {
			if strings.Contains(r.stdout, k) {
				seen[k]++
				n++
			}
		}
		require.LessOrEqual(t, n, 2, "a page of --limit 2: %s", r.stdout)
		i := strings.Index(r.stderr, "more:\n  sentinel ")
		if i < 0 {
			break
		}
		line := strings.SplitN(r.stderr[i+len("more:\n  sentinel "):], "\n", 2)[0]
		args = strings.Fields(line)
		require.Contains(t, args, "--after", line)
		require.Contains(t, args, e.schema, "the command keeps --schema: %s", line)
		// e.run adds --schema first; the printed command has it already.
		for j, a := range args {
			if a == "--schema" {
				args = append(args[:j:j], args[j+2:]...)
				break
			}
		}
	}
	for _, k := range keys {
		require.Equal(t, 1, seen[k], "key %s listed once over the pages", k)
	}

	r := e.run("idempotency", "list", "--state", "completed", "--limit", "2", "--json")
	requireCode(t, r, exitOK)
	var out struct {
		Keys []idemKeyJSON
		Next string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 2)
	require.NotEmpty(t, out.Next, "--json gives the next page's cursor")

	requireCode(t, e.run("idempotency", "list", "--limit", "2"), exitUsage)
	requireCode(t, e.run("idempotency", "list", "--state", "completed", "--limit", "0"), exitUsage)
}

// On a busy table the key an operator was paged about could be found
// only by paging through every completed key: idempotency list had no
// filter by key. PREFIX (with its --scope, stored before the key) keeps
// the keys starting with it, a page of --limit at a time, and the
// command for the next page keeps the filter.
func TestIdempotencyListByPrefix(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	srv := newChargeServer(e, "payments")
	srv.post(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"amount":1}`) // the server's first charge panics
	wanted := []string{
		"f00dfeed-0000-4000-8000-000000000001",
		"f00dfeed-0000-4000-8000-000000000002",
		"f00dfeed-0000-4000-8000-000000000003",
	}
	others := []string{"beefcafe-0000-4000-8000-000000000001", "beefcafe-0000-4000-8000-000000000002"}
	for _, k := range append(append([]string{}, others...), wanted...) {
		require.Equal(t, 201, srv.post(t, k, `{"amount":100}`).status)
	}
	// Another scope's key with the same prefix.
	require.Equal(t, 201, postCharge(t, srv.Server, "acct_7", "f00dfeed-0000-4000-8000-00000000000f", `{"amount":1}`).status)

	seen := map[string]int{}
	args := []string{"idempotency", "list", "--state", "completed", "f00dfeed", "--scope", "acct_42", "--limit", "2"}
	for page := 1; ; page++ {
		require.LessOrEqual(t, page, 3, "pages")
		r := e.run(args...)
		requireCode(t, r, exitOK)
		for _, k := range append(append([]string{}, others...), "f00dfeed-0000-4000-8000-00000000000f") {
			require.NotContains(t, r.stdout, k, "filtered out")
		}
		for _, k := range wanted {
			if strings.Contains(r.stdout, k) {
				seen[k]++
			}
		}
		i := strings.Index(r.stderr, "more:\n  sentinel ")
		if i < 0 {
			break
		}
		line := strings.SplitN(r.stderr[i+len("more:\n  sentinel "):], "\n", 2)[0]
		args = strings.Fields(line)
		require.Contains(t, args, "f00dfeed", "the next page keeps PREFIX: %s", line)
		require.Contains(t, args, "acct_42", "the next page keeps --scope: %s", line)
		for j, a := range args {
			if a == "--schema" {
				args = append(args[:j:j], args[j+2:]...)
				break
			}
		}
	}
	for _, k := range wanted {
		require.Equal(t, 1, seen[k], "key %s listed once over the pages", k)
	}

	r := e.run("idempotency", "list", "--state", "completed", "f00dfeed", "--scope", "acct_42", "--limit", "2", "--json")
	requireCode(t, r, exitOK)
	var out struct {
		Keys []idemKeyJSON
		Next string
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 2)
	require.NotEmpty(t, out.Next)
	r = e.run("idempotency", "list", "--state", "completed", "f00dfeed", "--scope", "acct_42", "--limit", "2", "--after", out.Next, "--json")
	requireCode(t, r, exitOK)
	out.Keys, out.Next = nil, ""
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 1)
	require.Empty(t, out.Next)

	// --scope alone: that scope's keys; the open ones too.
	r = e.run("idempotency", "list", "--state", "completed", "--scope", "acct_7", "--json")
	requireCode(t, r, exitOK)
	out.Keys = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 1)
	require.Equal(t, "acct_7", out.Keys[0].Scope)
	r = e.run("idempotency", "list", "8e03978e", "--scope", "acct_42")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "8e03978e-40d5-43e8-bc93-6894a57f9324")
	r = e.run("idempotency", "list", "8e03978e", "--scope", "acct_7")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stdout, "8e03978e-40d5")

	// PREFIX without its scope could match nothing the operator meant.
	r = e.run("idempotency", "list", "--state", "completed", "f00dfeed")
	requireCode(t, r, exitUsage)
	require.Contains(t, r.stderr, "--scope")
}
