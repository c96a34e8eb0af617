package console_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// After an operator's reconcile the key's row names the operator: its
// owner, and now its host and pid too (the reconciling process's, not
// the crashed worker's). The key page says where the stopped attempt ran
// ("Taken from"), from the reconciling event's history, also after
// force-complete.
func TestKeyPageSaysWhereTheReconciledAttemptRan(t *testing.T) {
	c, schema := newClient(t)
	ctx := ctxT(t)
	p, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	worker, err := sentinel.New(p, &sentinel.Config{Schema: schema, Owner: "worker-a", Host: "worker-7.example", PID: 4242})
	require.NoError(t, err)
	t.Cleanup(worker.Close)
	_, err = sentinel.Once(ctx, worker, "charge", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.ErrorIs(t, err, sentinel.ErrUncertain)
	ex, err := c.Reconcile(ctx, "charge")
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, []any{host, os.Getpid()}, []any{ex.Host, ex.PID})

	s := server(t, c, console.Options{OperatorToken: opToken})
	for _, step := range []string{"reconciling", "completed"} {
		code, body := get(t, s.URL+"/ops/key?ns=default&key=charge")
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, "<tr><th>Host</th><td>"+host+" (pid "+strconv.Itoa(os.Getpid())+")</td></tr>", step)
		require.NotContains(t, body, "<th>Hard expiry</th>", step+": the worker's hard expiry bounded its lease; nothing happens at it now")
		require.Contains(t, body, `<tr id="key-taken-from"><th>Taken from</th><td><code>worker-a</code> on worker-7.example (pid 4242), token 1, by reconcile`, step)
		if step == "reconciling" {
			require.NoError(t, c.ForceComplete(ctx, "charge", 5, sentinel.WithToken(ex.Token)))
		}
	}
}
