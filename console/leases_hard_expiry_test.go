package console_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel"
	"github.com/sentinel-coordination/sentinel/console"
)

// A lease without a hard TTL showed an empty "Hard expiry" cell, where
// every other cell says "—" for nothing (the pages' ts); it says "—" now.
func TestLeasesPageHardExpiryAbsentSaysDash(t *testing.T) {
	c, _ := newClient(t)
	ctx := ctxT(t)
	soft, err := c.Lease(ctx, "no-hard-ttl", sentinel.WithTTL(10*time.Second))
	require.NoError(t, err)
	defer soft.Release(context.Background())
	hard, err := c.Lease(ctx, "with-hard-ttl", sentinel.WithTTL(10*time.Second), sentinel.WithHardTTL(time.Minute))
	require.NoError(t, err)
	defer hard.Release(context.Background())
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/leases")
	require.Equal(t, http.StatusOK, code, body)
	lastCell := func(key string) string {
		m := regexp.MustCompile(`<tr><td><code>` + key + `</code></td>.*?<td>([^<]*)(?:<small[^>]*>[^<]*</small>)?</td></tr>`).FindStringSubmatch(body)
		require.NotNil(t, m, "row of %s: %s", key, body)
		return m[1]
	}
	require.Equal(t, "—", lastCell("no-hard-ttl"), "hard expiry of a lease without a hard TTL")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z\s*$`, lastCell("with-hard-ttl"))
}
