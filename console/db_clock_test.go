package console_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// leaseAgeRE finds the relative time of a key page's lease expiry.
var leaseAgeRE = regexp.MustCompile(`<th>Lease expires</th><td>[^<]*<small class="age" data-t="[^"]*">([^<]*)</small>`)

// readAtRE finds when the page says it was read.
var readAtRE = regexp.MustCompile(`data-read-at="(\d+)"`)

// Every time a page shows was written by the database (a lease's expiry,
// when a key entered its state), but its relative time ("1.6s ago", "in
// 12s") was counted from the console's own clock: a console whose host
// clock is 10 minutes behind the database's (sentinel serve on an
// operator's laptop) said a lease that had just expired expires "in
// 9m59s, expired", and the page's "As read at" was 10 minutes before the
// key's own times. The console now counts from the database clock (its
// offset from the console's measured at most every 30s).
func TestRelativeTimesCountFromTheDatabaseClock(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "pay-1") // its lease ended as fn failed: expired just now
	h, err := console.New(c, console.Options{ReadOnly: true})
	require.NoError(t, err)
	console.SetClock(h, func() time.Time { return time.Now().Add(-10 * time.Minute) })
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)

	code, body := get(t, s.URL+"/key?ns=default&key=pay-1")
	require.Equal(t, http.StatusOK, code, body)
	m := leaseAgeRE.FindStringSubmatch(body)
	require.NotNil(t, m, body)
	require.Regexp(t, `^(just now|[0-9.]+s ago)$`, m[1], "an expired lease, a moment ago")
	r := readAtRE.FindStringSubmatch(body)
	require.NotNil(t, r)
	ms, err := strconv.ParseInt(r[1], 10, 64)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.UnixMilli(ms), time.Minute, "the page says it was read at a time of the database clock")
}
