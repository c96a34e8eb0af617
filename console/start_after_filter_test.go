package console_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sentinel-coordination/sentinel/console"
)

// The start page filtered by "Changed after" a time within the last 15
// minutes answered 400 "invalid UpdatedAfter: must be before
// UpdatedBefore": its "Rerun pending, needs an operator" section reads
// the keys changed before now - RerunPendingAfter, and the filter left it
// no room. That section is now empty (None.), the others read as asked.
func TestStartPageChangedAfterRecentTime(t *testing.T) {
	c, _ := newClient(t)
	uncertain(t, c, "pay-1")
	s := server(t, c, console.Options{ReadOnly: true})
	code, body := get(t, s.URL+"/ops/?"+url.Values{"after": {time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)}}.Encode())
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, sectionOf(t, body, "Uncertain"), `data-key="pay-1"`)
	require.Contains(t, sectionOf(t, body, "Rerun pending, needs an operator (for more than 15m)"), "None.")
	require.Contains(t, sectionOf(t, body, "Reconciling, needs an operator (for more than 1h)"), "None.")
}
