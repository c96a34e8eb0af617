package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// An uncertain key became uncertain when its lease ended, not when its
// attempt started (updated_at, which lease renewals do not move). The key
// page's "In this state since" and the executions list's Since showed
// updated_at, hours earlier than `sentinel inspect`'s since: for the same
// key. Both show Execution.Since now: the lease's end.
func TestUncertainSinceIsTheLeaseEnd(t *testing.T) {
	c, schema := newClient(t)
	uncertain(t, c, "order-1")
	var updated, leaseEnd time.Time
	require.NoError(t, admin.QueryRow(ctxT(t), "UPDATE "+pgx.Identifier{schema, "executions"}.Sanitize()+
		` SET updated_at = pg_catalog.clock_timestamp() - interval '3 hours',
		      lease_expires_at = pg_catalog.clock_timestamp() - interval '20 minutes'
		  WHERE key = 'order-1' RETURNING updated_at, lease_expires_at`).Scan(&updated, &leaseEnd))
	const layout = "2006-01-02 15:04:05.000Z"
	shown, start := leaseEnd.UTC().Format(layout), updated.UTC().Format(layout)
	s := server(t, c, console.Options{OperatorToken: opToken})

	code, body := get(t, s.URL+"/ops/key?"+url.Values{"ns": {"default"}, "key": {"order-1"}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `<tr><th>In this state since</th><td[^>]*>`+regexp.QuoteMeta(shown)+` <small class="age"[^>]*>2\dm\d+s ago</small>`, body)
	require.NotContains(t, body, start, "the attempt's start is not shown as when it became uncertain")

	for _, tab := range []string{"attention", "executing", "all"} {
		code, body = get(t, s.URL+"/ops/?state="+tab)
		require.Equal(t, http.StatusOK, code, body)
		require.Regexp(t, `<td[^>]* title="`+regexp.QuoteMeta(shown)+`">`+regexp.QuoteMeta(shown)+`<br><small class="age"[^>]*>2\dm\d+s ago</small>`, body, tab)
		require.NotContains(t, body, start, tab)
	}
}
