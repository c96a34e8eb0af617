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

// An elector that gave no AppVersion: the leader's "App version" and the
// members' "Version" were blank cells, which read as a value lost or not
// loaded. They now say "—", the tooltip saying none was given (as a host
// not recorded does); sentinel leader leaves the line out.
func TestElectionsPageSaysAppVersionNotGiven(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	el, err := c.Elector("scheduler", sentinel.ElectorOptions{})
	require.NoError(t, err)
	ran := make(chan error, 1)
	go func() { ran <- el.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	require.Eventually(t, el.IsLeader, 10*time.Second, 20*time.Millisecond)
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/elections?group=scheduler")
	require.Equal(t, http.StatusOK, code, body)
	require.NotRegexp(t, regexp.MustCompile(`<th>App version</th><td></td>`), body)
	require.Regexp(t, regexp.MustCompile(`<th>App version</th><td><span class="unknown"[^>]*title="[^"]*AppVersion[^"]*">—</span></td>`), body)
	require.NotRegexp(t, regexp.MustCompile(`<td>vm[^<]*</td><td></td>|</td><td></td><td>\d{4}-`), body, "the member's Version cell")
	require.Equal(t, 2, len(regexp.MustCompile(`title="none given[^"]*">—</span>`).FindAllString(body, -1)), "the leader's and the member's")
}
