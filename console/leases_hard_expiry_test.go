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

// A lease without a hard TTL showed an empty "Hard expiry" cell, then
// "—"; but "—" means "unknown" or "not recorded" on every other page (the
// pages' ts, a host not recorded), while here it meant that nothing bounds
// the lease. The cell now says "none", with a title saying what it means.
func TestLeasesPageHardExpiryAbsentSaysNone(t *testing.T) {
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
		m := regexp.MustCompile(`<tr><td><code>` + key + `</code></td>.*?<td>((?:<span class="hard-none" title="[^"]*">)?[^<]*(?:</span>)?)(?:<small[^>]*>[^<]*</small>)?</td></tr>`).FindStringSubmatch(body)
		require.NotNil(t, m, "row of %s: %s", key, body)
		return m[1]
	}
	require.Equal(t, `<span class="hard-none" title="No hard TTL: nothing bounds this lease but its renewals (WithHardTTL not given)">none</span>`,
		lastCell("no-hard-ttl"), "hard expiry of a lease without a hard TTL")
	require.NotContains(t, lastCell("no-hard-ttl"), "—", "— means unknown elsewhere")
	require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z\s*$`, lastCell("with-hard-ttl"))
}
