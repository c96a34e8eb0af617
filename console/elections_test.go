package console_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

func TestElectionsPage(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	el, err := c.Elector("scheduler", sentinel.ElectorOptions{AppVersion: "1.4.2<i>"})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 20*time.Millisecond)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/elections?group=scheduler")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `id="leader"`)
	require.Contains(t, body, ">"+strconv.FormatInt(el.Term(), 10)+"<")
	require.Contains(t, body, "1.4.2&lt;i&gt;")
	require.Contains(t, body, "leader</span>")
	shotURL(t, s.URL+"/ops/elections?group=scheduler", "elections")
	code, body = get(t, s.URL+"/ops/elections?group=nobody")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No leader now.")
	code, _ = get(t, s.URL+"/ops/elections")
	require.Equal(t, http.StatusOK, code)
}

// A group typed without a namespace is looked for in every namespace (as
// the list of groups is): its leader is shown, not "No leader now".
func TestElectionsPageGroupOfAnotherNamespace(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	el, err := c.Elector("scheduler-pay", sentinel.ElectorOptions{Namespace: "payments"})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 20*time.Millisecond)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/elections?group=scheduler-pay")
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "No leader now.", "the group's leader in namespace payments was hidden")
	require.Contains(t, body, `id="leader"`)
	require.Contains(t, body, ">"+strconv.FormatInt(el.Term(), 10)+"<")

	// The same group name in two namespaces: the operator is shown both.
	el2, err := c.Elector("scheduler-pay", sentinel.ElectorOptions{Namespace: "office"})
	require.NoError(t, err)
	ran2 := make(chan error, 1)
	go func() { ran2 <- el2.Run(ctx) }()
	defer func() { cancel(); <-ran2 }()
	require.Eventually(t, el2.IsLeader, 10*time.Second, 20*time.Millisecond)
	code, body = get(t, s.URL+"/ops/elections?group=scheduler-pay")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "elections?group=scheduler-pay&amp;ns=office")
	require.Contains(t, body, "elections?group=scheduler-pay&amp;ns=payments")
	require.NotContains(t, body, "No leader now.")
}

// More groups than the page lists: the page says so, instead of dropping
// the rest (a live leader among them) in silence.
func TestElectionsPageSaysWhenTruncated(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	_, err := admin.Exec(ctx, `INSERT INTO `+schema+`.leaders (namespace, election, owner, term, elected_at, renewed_at, expires_at)
SELECT 'default', 'group-' || pg_catalog.lpad(i::text, 4, '0'), 'w', 1, now(), now(), now() + interval '1 hour'
FROM pg_catalog.generate_series(1, 1001) AS i`)
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/elections")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "group-1000")
	require.NotContains(t, body, "group-1001")
	require.Contains(t, body, `id="groups-more"`, "the page dropped the 1001st group without saying so")
}

// Options.Namespace narrows the list of groups as it narrows the other
// lists (leases, queues, executions); ?all=1 lists every namespace.
func TestElectionsPageListsOptionsNamespace(t *testing.T) {
	c, schema := newClient(t)
	_, err := admin.Exec(ctxT(t), `INSERT INTO `+schema+`.leaders (namespace, election, owner, term, elected_at, renewed_at, expires_at)
VALUES ('payments', 'group-pay', 'w', 1, now(), now(), now() + interval '1 hour'),
       ('office', 'group-office', 'w', 1, now(), now(), now() + interval '1 hour')`)
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true, Namespace: "payments"})
	code, body := get(t, s.URL+"/ops/elections")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "group-pay")
	require.NotContains(t, body, "group-office", "the list ignored Options.Namespace")
	code, body = get(t, s.URL+"/ops/elections?all=1")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "group-pay")
	require.Contains(t, body, "group-office")
}
