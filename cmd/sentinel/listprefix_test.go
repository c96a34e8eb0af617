package main

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
)

// An operator paged about a key ("charge-42-7") or a family of keys
// ("charge-42-") had to page through every execution with list: list
// PREFIX keeps only the keys starting with PREFIX (as leases PREFIX and
// idempotency list PREFIX do), with every other filter, and the command
// of the next page keeps it.

// listKeys runs list with args and --json, and returns the keys listed
// (namespace/key, sorted) and the "next" cursor.
func listKeys(t *testing.T, e *env, args ...string) ([]string, string) {
	t.Helper()
	r := e.run(append([]string{"list", "--json"}, args...)...)
	requireCode(t, r, exitOK)
	var page struct {
		Executions []execJSON `json:"executions"`
		Next       string     `json:"next"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &page), r.stdout)
	keys := []string{}
	for _, x := range page.Executions {
		keys = append(keys, x.Namespace+"/"+x.Key)
	}
	sort.Strings(keys)
	return keys, page.Next
}

func TestListKeyPrefix(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	pay, bill := e.newClient("payments"), e.newClient("billing")
	done := func(c *sentinel.Client, key string) {
		t.Helper()
		_, err := sentinel.Once(ctxT(t), c, key, func(context.Context) (int, error) { return 1, nil })
		require.NoError(t, err)
	}
	done(pay, "charge-42-a")
	e.uncertainKey(pay, "charge-42-b")
	done(pay, "charge-43-a")
	done(pay, "charge-4")
	done(bill, "charge-42-c")
	done(bill, "refund-42-a")

	// Every namespace (the default, or --all-namespaces), one namespace.
	keys, next := listKeys(t, e, "charge-42-")
	require.Equal(t, []string{"billing/charge-42-c", "payments/charge-42-a", "payments/charge-42-b"}, keys)
	require.Empty(t, next)
	keys, _ = listKeys(t, e, "charge-42-", "--all-namespaces")
	require.Equal(t, []string{"billing/charge-42-c", "payments/charge-42-a", "payments/charge-42-b"}, keys)
	keys, _ = listKeys(t, e, "charge-42-", "-n", "payments")
	require.Equal(t, []string{"payments/charge-42-a", "payments/charge-42-b"}, keys)
	keys, _ = listKeys(t, e, "charge-42-b") // one key, by its whole name
	require.Equal(t, []string{"payments/charge-42-b"}, keys)

	// With the other filters.
	keys, _ = listKeys(t, e, "charge-42-", "--uncertain")
	require.Equal(t, []string{"payments/charge-42-b"}, keys)
	keys, _ = listKeys(t, e, "charge-42-", "--state", "completed")
	require.Equal(t, []string{"billing/charge-42-c", "payments/charge-42-a"}, keys)
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{e.schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - interval '2 hours' WHERE key IN ('charge-42-a', 'charge-43-a')")
	require.NoError(t, err)
	keys, _ = listKeys(t, e, "charge-42-", "--older-than", "1h")
	require.Equal(t, []string{"payments/charge-42-a"}, keys)
	keys, _ = listKeys(t, e, "charge-42-", "--newer-than", "1h", "-n", "payments")
	require.Equal(t, []string{"payments/charge-42-b"}, keys)

	// Human output.
	r := e.run("list", "charge-42-", "-n", "payments")
	requireCode(t, r, exitOK)
	require.Regexp(t, `payments\s+charge-42-a\s+completed`, r.stdout)
	require.Regexp(t, `payments\s+charge-42-b\s+UNCERTAIN`, r.stdout)
	require.NotContains(t, r.stdout, "charge-43-a")
	require.NotContains(t, r.stdout, "charge-4 ")

	// Pages: the next page's command, and --json's "next", keep PREFIX.
	r = e.run("list", "charge-42-", "--limit", "1")
	requireCode(t, r, exitOK)
	seen := []string{}
	for {
		for _, k := range []string{"charge-42-a", "charge-42-b", "charge-42-c", "charge-43-a", "refund-42-a"} {
			if strings.Contains(r.stdout, k) {
				seen = append(seen, k)
			}
		}
		if !strings.Contains(r.stderr, "more (or add --all)") {
			break
		}
		r = runPrinted(t, findCommand(t, r.stderr, "sentinel list"), "")
		requireCode(t, r, exitOK)
	}
	sort.Strings(seen)
	require.Equal(t, []string{"charge-42-a", "charge-42-b", "charge-42-c"}, seen)
	var all []string
	args := []string{"charge-42-", "--limit", "1"}
	for {
		keys, next := listKeys(t, e, args...)
		all = append(all, keys...)
		if next == "" {
			break
		}
		args = []string{"charge-42-", "--limit", "1", "--after", next}
	}
	sort.Strings(all)
	require.Equal(t, []string{"billing/charge-42-c", "payments/charge-42-a", "payments/charge-42-b"}, all)
	keys, _ = listKeys(t, e, "charge-42-", "--limit", "1", "--all")
	require.Equal(t, []string{"billing/charge-42-c", "payments/charge-42-a", "payments/charge-42-b"}, keys)

	// None: as any listing that finds nothing, naming PREFIX.
	r = e.run("list", "charge-99-")
	requireCode(t, r, exitOK)
	require.Empty(t, r.stdout)
	require.Contains(t, r.stderr, `no executions match in any namespace with a key starting with "charge-99-"`)
	r = e.run("list", "charge-42-", "-n", "mail")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stderr, `no executions match in namespace "mail" with a key starting with "charge-42-"`)
	// The operator named the wrong namespace: the listing that shows the
	// keys is printed, and runs as printed.
	p := runPrinted(t, findCommand(t, r.stderr, "sentinel list"), "")
	requireCode(t, p, exitOK)
	require.Regexp(t, `billing\s+charge-42-c`, p.stdout)
	require.Regexp(t, `payments\s+charge-42-a`, p.stdout)
	r = e.run("list", "charge-99-", "-n", "mail")
	requireCode(t, r, exitOK)
	require.NotContains(t, r.stderr, "other namespaces", "no other namespace has such keys")
	keys, next = listKeys(t, e, "charge-99-")
	require.Empty(t, keys)
	require.Empty(t, next)

	r = runBin(t, nil, nil, "list", "--help")
	requireCode(t, r, exitOK)
	require.Contains(t, r.stdout, "list [PREFIX]")
	require.Contains(t, r.stdout, "sentinel list charge-42-")
}

// A PREFIX with spaces, quotes and "$", or one that reads as a flag
// (after "--"), is listed, and the next page's command runs as printed.
func TestListKeyPrefixCopyPaste(t *testing.T) {
	e := newEnv(t)
	e.migrate()
	for _, tc := range []struct {
		prefix string
		args   func(p string) []string
	}{
		{`pay $HOME 'q' "x" `, func(p string) []string { return []string{"list", p, "--limit", "1"} }},
		{`-7 o'clock $USER `, func(p string) []string { return []string{"list", "--limit", "1", "--", p} }},
	} {
		for _, k := range []string{tc.prefix + "1", tc.prefix + "2", strings.TrimSpace(tc.prefix) + "-decoy"} {
			_, err := sentinel.Once(ctxT(t), e.client, k, func(context.Context) (int, error) { return 1, nil })
			require.NoError(t, err)
		}
		r := e.run(tc.args(tc.prefix)...)
		requireCode(t, r, exitOK)
		require.Contains(t, r.stdout, tc.prefix+"1")
		require.NotContains(t, r.stdout, "decoy")
		p := runPrinted(t, findCommand(t, r.stderr, "sentinel list"), "")
		requireCode(t, p, exitOK)
		require.Contains(t, p.stdout, tc.prefix+"2", "%s", p.stderr)
		require.NotContains(t, p.stdout, "decoy")
		require.NotContains(t, p.stderr, "more")
	}
}

// A PREFIX the library would refuse exits 2 before connecting: nothing is
// read, no database named, nothing on stdout. An empty one (a script's
// "$KEY" with KEY unset) would list every key: refused too.
func TestListKeyPrefixBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"list", ""},
		{"list", "bad\xffutf8"},
		{"list", strings.Repeat("k", sentinel.MaxKeyLen+1)},
		{"list", "a", "b"},
		// leases takes a PREFIX too: "$KEY" with KEY unset listed every lease.
		{"leases", ""},
		{"leases", "--all-namespaces", ""},
	} {
		r := runBin(t, []string{"DATABASE_URL=postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, nil, args...)
		requireCode(t, r, exitUsage)
		require.Contains(t, r.stderr, "sentinel:", "%q", args)
		require.NotContains(t, r.stderr, `database "none"`, "%q", args)
		require.Empty(t, r.stdout, "%q", args)
	}
}
