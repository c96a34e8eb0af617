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

func TestLeasesAndQueuesPages(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	l, err := c.Lease(ctx, `invoice-<script>alert(1)</script>`, sentinel.WithTTL(10*time.Second))
	require.NoError(t, err)
	defer l.Release(context.Background())
	holder, err := c.Turn(ctx, "printer ü", sentinel.WithLabel(`nightly "report"`))
	require.NoError(t, err)
	defer holder.Release(context.Background())
	waiting := make(chan error, 1)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go func() {
		tn, err := c.Turn(wctx, "printer ü", sentinel.WithLabel("<b>second</b>"))
		if err == nil {
			err = tn.Release(context.Background())
		}
		waiting <- err
	}()
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "invoice-&lt;script&gt;alert(1)&lt;/script&gt;")
	require.NotContains(t, body, "<script>alert(1)")
	require.Contains(t, body, ">"+strconv.FormatInt(l.Token(), 10)+"<")

	require.Eventually(t, func() bool {
		q, err := c.Queue(ctx, "printer ü")
		return err == nil && len(q.Waiting) == 1
	}, 10*time.Second, 20*time.Millisecond)
	code, body = get(t, s.URL+"/ops/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, "printer ü")
	require.Contains(t, body, "holder</span>")
	require.Contains(t, body, "nightly &#34;report&#34;")
	require.Contains(t, body, "&lt;b&gt;second&lt;/b&gt;")
	require.Contains(t, body, ">"+strconv.FormatInt(holder.Ticket(), 10)+"<")
	shotURL(t, s.URL+"/ops/queues", "queues")
	wcancel()
	<-waiting
}
