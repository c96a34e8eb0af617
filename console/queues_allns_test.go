package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// An operator who names no namespace sees the queues of every namespace,
// as on the start page; Options.Namespace (serve -n) narrows.
func TestQueuesPageEveryNamespace(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	for _, ns := range []string{"default", "payments"} {
		tn, err := c.Turn(ctx, "printer-"+ns, sentinel.WithNamespace(ns), sentinel.WithLabel("label-of-"+ns))
		require.NoError(t, err)
		defer tn.Release(context.Background())
	}
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "printer-default")
	require.Contains(t, body, "printer-payments", "a queue of another namespace is hidden from an operator who named none")
	require.Contains(t, body, "label-of-payments")

	code, body = get(t, s.URL+"/ops/queues?ns=payments")
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.Contains(body, "printer-payments") && !strings.Contains(body, "printer-default"), body)

	narrow := server(t, c, console.Options{ReadOnly: true, Namespace: "payments"})
	code, body = get(t, narrow.URL+"/ops/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.Contains(body, "printer-payments") && !strings.Contains(body, "printer-default"), body)
}

// AllQueues: every namespace's queues, holder first, waiters in order.
func TestAllQueues(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	a, err := c.Turn(ctx, "r", sentinel.WithNamespace("b-ns"))
	require.NoError(t, err)
	defer a.Release(context.Background())
	b, err := c.Turn(ctx, "r", sentinel.WithNamespace("a-ns"))
	require.NoError(t, err)
	defer b.Release(context.Background())
	qs, err := c.AllQueues(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 2)
	require.Equal(t, "a-ns", qs[0].Namespace)
	require.Equal(t, b.Ticket(), qs[0].Holder.Ticket)
	require.Equal(t, "b-ns", qs[1].Namespace)
	require.Equal(t, a.Ticket(), qs[1].Holder.Ticket)
	require.Empty(t, qs[1].Waiting)
}

// A holder whose client has not confirmed its turn (a handover under way,
// or a client that died before confirming) is marked so, as sentinel
// queue status marks it: the page showed it as an ordinary holder.
func TestQueuesPageMarksAHandover(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	tn, err := c.Turn(ctx, "printer", sentinel.WithLabel("nightly"))
	require.NoError(t, err)
	defer tn.Release(context.Background())
	_, err = admin.Exec(ctx, `UPDATE `+schema+`.tickets SET served_at = NULL WHERE ticket = $1`, tn.Ticket())
	require.NoError(t, err)
	q, err := c.Queue(ctx, "printer")
	require.NoError(t, err)
	require.True(t, q.Holder.ServedAt.IsZero())
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `class="handover"`, "a holder that has not confirmed its turn shown as serving")
}
