package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// rerunPending leaves key of namespace ns rerun pending (WithRerun(3):
// fn failed at attempt 1) and returns its token.
func rerunPending(t *testing.T, c *sentinel.Client, ns, key string) int64 {
	t.Helper()
	ctx := ctxT(t)
	_, err := sentinel.Once(ctx, c, key, func(context.Context) (int, error) {
		return 0, errors.New("provider timed out")
	}, sentinel.WithRerun(3), sentinel.WithNamespace(ns))
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Inspect(ctx, key, sentinel.WithNamespace(ns))
	require.NoError(t, err)
	require.True(t, ex.Rerunnable())
	return ex.Token
}

// ageExecutions moves back by d the lease's end and the last change of
// every execution of schema: a key left rerun pending (rerunPending) then
// stopped d ago, stale once d passes Options.RerunPendingAfter.
func ageExecutions(t *testing.T, schema string, d time.Duration) {
	t.Helper()
	_, err := admin.Exec(ctxT(t), "UPDATE "+pgx.Identifier{schema, "executions"}.Sanitize()+
		" SET updated_at = updated_at - $1 * interval '1 second', lease_expires_at = lease_expires_at - $1 * interval '1 second'", d.Seconds())
	require.NoError(t, err)
}

// A key rerun pending whose lease ended long ago (no caller with
// WithRerun came back) needs an operator: sentinel status --exit-code
// pages on it after --rerun-pending-after (15m by default) and inspect
// prints the reconcile command. The console said "no operator is needed"
// forever, offered no action, and its start page ("Needs an operator",
// every namespace) did not list it. Now the start page lists such keys
// (lease ended more than 15m ago; a fresh one is not listed), their page
// says what to do and offers Reconcile, which works.
func TestRerunPendingStaleNeedsOperator(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	oldToken := rerunPending(t, c, "mail", "receipt-old")
	rerunPending(t, c, "mail", "receipt-new")
	table := pgx.Identifier{schema, "executions"}.Sanitize()
	_, err := admin.Exec(ctx, "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
		lease_expires_at = lease_expires_at - interval '20 minutes' WHERE key = 'receipt-old'`)
	require.NoError(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Rerun pending, needs an operator (for more than 15m)")
	require.Contains(t, body, "receipt-old", "the start page lists a key rerun pending for 20 minutes")
	require.NotContains(t, body, "receipt-new", "a key rerun pending for less than 15m needs no operator yet")

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"mail"}, "key": {"receipt-old"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, "no operator is needed")
	require.Contains(t, body, "no caller with WithRerun came back")
	require.Contains(t, body, "confirm?action=reconcile&amp;key=receipt-old&amp;ns=mail&amp;token=1")

	code, body = post(t, s.URL, confirmForm(t, s.URL, "reconcile", "mail", "receipt-old", oldToken))
	require.Equal(t, http.StatusOK, code, body)
	ex, err := c.Inspect(ctx, "receipt-old", sentinel.WithNamespace("mail"))
	require.NoError(t, err)
	require.Equal(t, sentinel.StateReconciling, ex.State)

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"mail"}, "key": {"receipt-new"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "no operator is needed")
	require.NotContains(t, body, "action=reconcile")
}

// Options.RerunPendingAfter moves the threshold, as sentinel status's
// --rerun-pending-after does; the Rerun pending tab lists every key rerun
// pending, fresh or not. A negative threshold is refused.
func TestRerunPendingAfterOption(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	rerunPending(t, c, "mail", "receipt-old")
	rerunPending(t, c, "mail", "receipt-new")
	table := pgx.Identifier{schema, "executions"}.Sanitize()
	_, err := admin.Exec(ctx, "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
		lease_expires_at = lease_expires_at - interval '20 minutes' WHERE key = 'receipt-old'`)
	require.NoError(t, err)
	_, err = console.New(c, console.Options{ReadOnly: true, RerunPendingAfter: -time.Minute})
	require.Error(t, err)
	s := server(t, c, console.Options{OperatorToken: opToken, RerunPendingAfter: time.Hour})

	code, body := get(t, s.URL+"/ops/")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "Rerun pending, needs an operator (for more than 1h)")
	require.NotContains(t, body, "receipt-old", "20 minutes is within the hour")

	code, body = get(t, s.URL+"/ops/key?"+url.Values{"ns": {"mail"}, "key": {"receipt-old"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "no operator is needed")
	require.NotContains(t, body, "action=reconcile")

	code, body = get(t, s.URL+"/ops/?state=rerun-pending")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "receipt-old")
	require.Contains(t, body, "receipt-new")
}

// The counts at the top of every page said "No uncertain keys in any
// namespace." and nothing else while a key rerun pending had waited for
// a re-run for 20 minutes (sentinel status --exit-code exits 5 for it):
// an operator on the leases page read that nothing needed them. They now
// name the namespaces with such keys, each linked to the start page's
// list of its keys.
func TestCountsNameRerunPendingStale(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	rerunPending(t, c, "mail", "receipt-old")
	rerunPending(t, c, "sms", "text-new")
	table := pgx.Identifier{schema, "executions"}.Sanitize()
	_, err := admin.Exec(ctx, "UPDATE "+table+` SET updated_at = updated_at - interval '1 hour',
		lease_expires_at = lease_expires_at - interval '20 minutes' WHERE key = 'receipt-old'`)
	require.NoError(t, err)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `id="rerun-stale-counts"><strong>Rerun pending, needs an operator \(for more than 15m[^<]*</strong> <a [^>]*href="\./\?ns=mail&amp;state=attention"[^>]*>mail: 1</a></span>`, body)
	require.NotContains(t, body, "sms: 1", "its lease ended just now")
}
